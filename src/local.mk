# src/local.mk: the engine (CLI, launcher, benchmarks, self-tests).
libburst_engine_a_SOURCES += src/cli.h src/bench.h src/selftest.h \
	src/cmd_pending.c src/cmd_version.c src/cmd_bench.c src/cmd_selftest.c \
	src/bench_util.c src/bench_kernels.c src/bench_kernels_ops.c src/bench_transport.c src/selftest_kernels.c src/selftest_transport.c \
	src/launcher.c
