# src/local.mk: the engine (CLI, launcher, benchmarks, self-tests).
libburst_engine_a_SOURCES += src/cli.h src/bench.h src/selftest.h \
	src/cmd_pending.c src/cmd_version.c src/cmd_bench.c src/cmd_selftest.c \
	src/bench_util.c src/bench_kernels.c src/bench_kernels_ops.c src/bench_transport.c src/selftest_kernels.c src/selftest_transport.c \
	src/launcher.c

# Distributed attention: layouts, the mask's block-level needs, the planner and
# the executor of the ring.
libburst_engine_a_SOURCES += src/seq_layout.h src/seq_layout.c src/attn_need.h src/attn_need.c \
	src/ring_schedule.h src/ring_schedule.c src/ring_exec.h src/ring_exec.c \
	src/attn_options.h src/attn_options.c src/cmd_plan.c

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

# `burst bench attention`: the ring against an all-gather baseline and one rank.
libburst_engine_a_SOURCES += src/bench_attention.c

# The LM head fused with the cross-entropy loss, chunked along the sequence.
libburst_engine_a_SOURCES += src/lm_head.h src/lm_head.c
check_PROGRAMS += tests/test_lm_head
TESTS += tests/test_lm_head
tests_test_lm_head_SOURCES = tests/test_lm_head.c
tests_test_lm_head_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
tests_test_lm_head_LDADD = $(LDADD) $(CHECK_LIBS)

# ZeRO-1 AdamW and the learning-rate schedule.
libburst_engine_a_SOURCES += src/optimizer.h src/optimizer.c
check_PROGRAMS += tests/optimizer_worker tests/test_optimizer
TESTS += tests/test_optimizer
tests_optimizer_worker_SOURCES = tests/optimizer_worker.c tests/worker_util.h
tests_test_optimizer_SOURCES = tests/test_optimizer.c tests/testutil.h tests/testutil.c
tests_test_optimizer_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
tests_test_optimizer_LDADD = $(LDADD) $(CHECK_LIBS)

# The training engine.
libburst_engine_a_SOURCES += src/model.h src/model.c src/token_source.h src/synthetic_source.c \
	src/cmd_train.c

# The configuration of `burst train`.
libburst_engine_a_SOURCES += src/train_config.h src/train_config.c
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
libburst_engine_a_SOURCES += src/hdf5_source.c

# Training checkpoints in HDF5 (io/checkpoint.c).
check_PROGRAMS += tests/test_checkpoint
TESTS += tests/test_checkpoint
tests_test_checkpoint_SOURCES = tests/test_checkpoint.c
tests_test_checkpoint_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
tests_test_checkpoint_LDADD = libburst_io.a $(EXTERNAL_LIBS) $(CHECK_LIBS)

# `burst data`: import, synthesise, describe and validate HDF5 corpora.
libburst_engine_a_SOURCES += src/cmd_data.c
check_PROGRAMS += tests/test_corpus
TESTS += tests/test_corpus tests/test_data.sh
EXTRA_DIST += tests/test_data.sh
tests_test_corpus_SOURCES = tests/test_corpus.c
tests_test_corpus_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
tests_test_corpus_LDADD = $(LDADD) $(CHECK_LIBS)

# `burst bench train`: throughput and memory of short training runs.
libburst_engine_a_SOURCES += src/bench_train.c
