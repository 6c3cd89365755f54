# util/local.mk: what every wing may use and that uses nothing of ours: the
# clock, the random-number generator, number parsing, exit codes, the CPUs a
# process may run on, checked allocation, error messages, the memory a
# process holds and the machine has left.
libburst_util_a_SOURCES += util/clock.h util/clock.c util/rng.h util/parse.h util/parse.c \
	util/exit_codes.h util/cores.h util/cores.c util/alloc.h util/alloc.c \
	util/fail.h util/fail.c util/options.h util/options.c \
	util/proc_memory.h util/proc_memory.c
