# tests/local.mk: every test of the project, in one list. The tests stand in a
# folder per wing (tests/kernels, tests/transport, tests/io, tests/attn,
# tests/train, tests/cli, tests/build), each multi-rank worker next to the test
# that launches it; tests/lib holds what they share.
AM_TESTS_ENVIRONMENT = \
	BURST='$(abs_top_builddir)/burst'; export BURST; \
	BURST_TEST_BUILDDIR='$(abs_top_builddir)'; export BURST_TEST_BUILDDIR; \
	BURST_TEST_SRCDIR='$(abs_top_srcdir)'; export BURST_TEST_SRCDIR; \
	CK_VERBOSITY=normal; export CK_VERBOSITY; \
	LSAN_OPTIONS='suppressions=$(abs_top_srcdir)/tests/lsan.supp:print_suppressions=0'; export LSAN_OPTIONS; \
	UBSAN_OPTIONS='print_stacktrace=1:halt_on_error=1'; export UBSAN_OPTIONS; \
	OMP_NUM_THREADS=$${OMP_NUM_THREADS:-2}; export OMP_NUM_THREADS;
EXTRA_DIST += tests/lsan.supp tests/run.sh
TEST_EXTENSIONS = .sh
SH_LOG_COMPILER = /bin/sh
# The result file of every test, for tests/run.sh's summary.
list-test-results:
	@echo $(TEST_LOGS:.log=.trs)
.PHONY: list-test-results

# ------------------------------------------------------------------ the build
# configure names the package to install when a dependency is missing.
TESTS += tests/build/test_configure.sh
EXTRA_DIST += tests/build/test_configure.sh

# ------------------------------------------------------------------ kernels
# The tiled attention against the double-precision reference.
check_PROGRAMS += tests/kernels/test_attention
TESTS += tests/kernels/test_attention
tests_kernels_test_attention_SOURCES = tests/kernels/test_attention.c
tests_kernels_test_attention_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
tests_kernels_test_attention_LDADD = libburst_kernels.a $(EXTERNAL_LIBS) $(CHECK_LIBS)

# GEMM, norms, RoPE, SwiGLU, embedding, AdamW, cross-entropy.
check_PROGRAMS += tests/kernels/test_ops
TESTS += tests/kernels/test_ops
tests_kernels_test_ops_SOURCES = tests/kernels/test_ops.c
tests_kernels_test_ops_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
tests_kernels_test_ops_LDADD = libburst_kernels.a $(EXTERNAL_LIBS) $(CHECK_LIBS)

# ------------------------------------------------------------------ transport
# Point-to-point, collectives, sub-communicators, failures and the launcher,
# with real ranks (tests/transport/transport_worker) under `burst run`.
check_PROGRAMS += tests/transport/transport_worker tests/transport/test_transport
TESTS += tests/transport/test_transport
tests_transport_transport_worker_SOURCES = tests/transport/transport_worker.c \
	tests/lib/worker_util.h
tests_transport_transport_worker_LDADD = libburst_transport.a $(EXTERNAL_LIBS)
tests_transport_test_transport_SOURCES = tests/transport/test_transport.c tests/lib/testutil.h \
	tests/lib/testutil.c
tests_transport_test_transport_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
tests_transport_test_transport_LDADD = libburst_transport.a $(EXTERNAL_LIBS) $(CHECK_LIBS)

# A real single-node Slurm started by the test itself (skips where not root).
TESTS += tests/transport/test_slurm.sh
EXTRA_DIST += tests/transport/test_slurm.sh tests/lib/slurm/start.sh tests/lib/slurm/stop.sh \
	tests/lib/slurm/README.md
clean-local: clean-local-tests
clean-local-tests:
	-if test -d tests/slurm-state; then sh $(srcdir)/tests/lib/slurm/stop.sh tests/slurm-state; fi
	-rm -rf tests/slurm-state
.PHONY: clean-local-tests

# ------------------------------------------------------------------ io
# Training checkpoints in HDF5 (io/checkpoint.c).
check_PROGRAMS += tests/io/test_checkpoint
TESTS += tests/io/test_checkpoint
tests_io_test_checkpoint_SOURCES = tests/io/test_checkpoint.c
tests_io_test_checkpoint_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
tests_io_test_checkpoint_LDADD = libburst_io.a $(EXTERNAL_LIBS) $(CHECK_LIBS)

# HDF5 corpora (io/corpus.c).
check_PROGRAMS += tests/io/test_corpus
TESTS += tests/io/test_corpus
tests_io_test_corpus_SOURCES = tests/io/test_corpus.c
tests_io_test_corpus_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
tests_io_test_corpus_LDADD = $(LDADD) $(CHECK_LIBS)

# ------------------------------------------------------------------ attn
# The ring planner's schedules, as data; distributed attention with real ranks
# (tests/attn/ring_worker) under `burst run`.
check_PROGRAMS += tests/attn/ring_worker tests/attn/test_ring_schedule tests/attn/test_ring
TESTS += tests/attn/test_ring_schedule tests/attn/test_ring
tests_attn_ring_worker_SOURCES = tests/attn/ring_worker.c
tests_attn_test_ring_schedule_SOURCES = tests/attn/test_ring_schedule.c
tests_attn_test_ring_schedule_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
tests_attn_test_ring_schedule_LDADD = $(LDADD) $(CHECK_LIBS)
tests_attn_test_ring_SOURCES = tests/attn/test_ring.c tests/lib/testutil.h \
	tests/lib/testutil.c
tests_attn_test_ring_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
tests_attn_test_ring_LDADD = $(LDADD) $(CHECK_LIBS)

# ------------------------------------------------------------------ train
# The LM head fused with the cross-entropy loss, chunked along the sequence.
check_PROGRAMS += tests/train/test_lm_head
TESTS += tests/train/test_lm_head
tests_train_test_lm_head_SOURCES = tests/train/test_lm_head.c
tests_train_test_lm_head_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
tests_train_test_lm_head_LDADD = $(LDADD) $(CHECK_LIBS)

# ZeRO-1 AdamW (ranks: tests/train/optimizer_worker) and the learning-rate schedule.
check_PROGRAMS += tests/train/optimizer_worker tests/train/test_optimizer
TESTS += tests/train/test_optimizer
tests_train_optimizer_worker_SOURCES = tests/train/optimizer_worker.c tests/lib/worker_util.h
tests_train_test_optimizer_SOURCES = tests/train/test_optimizer.c tests/lib/testutil.h \
	tests/lib/testutil.c
tests_train_test_optimizer_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
tests_train_test_optimizer_LDADD = $(LDADD) $(CHECK_LIBS)

# The configuration of `burst train`.
check_PROGRAMS += tests/train/test_train_config
TESTS += tests/train/test_train_config
tests_train_test_train_config_SOURCES = tests/train/test_train_config.c
tests_train_test_train_config_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
tests_train_test_train_config_LDADD = $(LDADD) $(CHECK_LIBS)

# Training end to end, and the gradients against finite differences
# (tests/train/train_gradcheck, on one rank or a ring).
check_PROGRAMS += tests/train/train_gradcheck tests/train/test_train
TESTS += tests/train/test_train
tests_train_train_gradcheck_SOURCES = tests/train/train_gradcheck.c
tests_train_test_train_SOURCES = tests/train/test_train.c tests/lib/testutil.h \
	tests/lib/testutil.c
tests_train_test_train_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
tests_train_test_train_LDADD = $(LDADD) $(CHECK_LIBS)

# ------------------------------------------------------------------ cli
# The command line's promises (help, usage errors, version).
check_PROGRAMS += tests/cli/test_cli
TESTS += tests/cli/test_cli
tests_cli_test_cli_SOURCES = tests/cli/test_cli.c tests/lib/testutil.h \
	tests/lib/testutil.c
tests_cli_test_cli_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
tests_cli_test_cli_LDADD = $(LDADD) $(CHECK_LIBS)

# `burst data`: import, synthesise, describe and validate HDF5 corpora.
TESTS += tests/cli/test_data.sh
EXTRA_DIST += tests/cli/test_data.sh
