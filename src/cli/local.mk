# src/cli/local.mk: the `burst` program: subcommands, the local launcher, the
# ranks' share of the cores and `burst selftest`.
burst_SOURCES += src/cli/burst.c src/cli/cli.h src/cli/cli.c src/cli/cmd_version.c \
	src/cli/cmd_bench.c src/cli/cmd_selftest.c src/cli/selftest.h src/cli/selftest_kernels.c \
	src/cli/selftest_transport.c src/cli/launcher.c src/cli/placement.h src/cli/placement.c \
	src/cli/cmd_plan.c src/cli/cmd_plan_memory.c src/cli/cmd_plan_time.c \
	src/cli/plan_fit.h src/cli/plan_fit.c src/cli/cmd_train.c src/cli/cmd_data.c \
	src/cli/cmd_convert.c src/cli/cmd_eval.c
