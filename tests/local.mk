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
