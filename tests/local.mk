# tests/local.mk: the test harness shared by every wing's tests.
AM_TESTS_ENVIRONMENT = \
	BURST='$(abs_top_builddir)/burst'; export BURST; \
	BURST_TEST_BUILDDIR='$(abs_top_builddir)'; export BURST_TEST_BUILDDIR; \
	BURST_TEST_SRCDIR='$(abs_top_srcdir)'; export BURST_TEST_SRCDIR; \
	CK_VERBOSITY=normal; export CK_VERBOSITY; \
	LSAN_OPTIONS='suppressions=$(abs_top_srcdir)/tests/lsan.supp:print_suppressions=0'; export LSAN_OPTIONS; \
	UBSAN_OPTIONS='print_stacktrace=1:halt_on_error=1'; export UBSAN_OPTIONS; \
	OMP_NUM_THREADS=$${OMP_NUM_THREADS:-2}; export OMP_NUM_THREADS;
EXTRA_DIST += tests/lsan.supp tests/run.sh tests/test_configure.sh
TESTS += tests/test_configure.sh

check_PROGRAMS += tests/test_cli
TESTS += tests/test_cli
tests_test_cli_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
tests_test_cli_LDADD = $(LDADD) $(CHECK_LIBS)
tests_test_cli_SOURCES = tests/test_cli.c tests/testutil.h tests/testutil.c

TEST_EXTENSIONS = .sh
SH_LOG_COMPILER = /bin/sh

clean-local: clean-local-tests
clean-local-tests:
	-if test -d tests/slurm-state; then sh $(srcdir)/tests/slurm/stop.sh tests/slurm-state; fi
	-rm -rf tests/slurm-state
.PHONY: clean-local-tests

# Tests of the engine: distributed attention and training.
check_PROGRAMS += tests/ring_worker
tests_ring_worker_SOURCES = tests/ring_worker.c

check_PROGRAMS += tests/test_ring_schedule tests/test_ring
TESTS += tests/test_ring_schedule tests/test_ring
tests_test_ring_schedule_SOURCES = tests/test_ring_schedule.c
tests_test_ring_schedule_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
tests_test_ring_schedule_LDADD = $(LDADD) $(CHECK_LIBS)
tests_test_ring_SOURCES = tests/test_ring.c tests/testutil.h tests/testutil.c
tests_test_ring_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
tests_test_ring_LDADD = $(LDADD) $(CHECK_LIBS)

# The LM head fused with the cross-entropy loss, chunked along the sequence.
check_PROGRAMS += tests/test_lm_head
TESTS += tests/test_lm_head
tests_test_lm_head_SOURCES = tests/test_lm_head.c
tests_test_lm_head_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
tests_test_lm_head_LDADD = $(LDADD) $(CHECK_LIBS)

# ZeRO-1 AdamW and the learning-rate schedule.
check_PROGRAMS += tests/optimizer_worker tests/test_optimizer
TESTS += tests/test_optimizer
tests_optimizer_worker_SOURCES = tests/optimizer_worker.c tests/worker_util.h
tests_test_optimizer_SOURCES = tests/test_optimizer.c tests/testutil.h tests/testutil.c
tests_test_optimizer_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
tests_test_optimizer_LDADD = $(LDADD) $(CHECK_LIBS)

# The configuration of `burst train`.
check_PROGRAMS += tests/test_train_config
TESTS += tests/test_train_config
tests_test_train_config_SOURCES = tests/test_train_config.c
tests_test_train_config_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
tests_test_train_config_LDADD = $(LDADD) $(CHECK_LIBS)
check_PROGRAMS += tests/train_gradcheck
tests_train_gradcheck_SOURCES = tests/train_gradcheck.c
check_PROGRAMS += tests/test_train
TESTS += tests/test_train
tests_test_train_SOURCES = tests/test_train.c tests/testutil.h tests/testutil.c
tests_test_train_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
tests_test_train_LDADD = $(LDADD) $(CHECK_LIBS)

# Training checkpoints in HDF5 (io/checkpoint.c).
check_PROGRAMS += tests/test_checkpoint
TESTS += tests/test_checkpoint
tests_test_checkpoint_SOURCES = tests/test_checkpoint.c
tests_test_checkpoint_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
tests_test_checkpoint_LDADD = libburst_io.a $(EXTERNAL_LIBS) $(CHECK_LIBS)

# `burst data`: import, synthesise, describe and validate HDF5 corpora.
check_PROGRAMS += tests/test_corpus
TESTS += tests/test_corpus tests/test_data.sh
EXTRA_DIST += tests/test_data.sh
tests_test_corpus_SOURCES = tests/test_corpus.c
tests_test_corpus_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
tests_test_corpus_LDADD = $(LDADD) $(CHECK_LIBS)
