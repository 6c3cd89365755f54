# transport/local.mk: bytes between ranks (UCX, NCCL, self), bootstrap, collectives.
libburst_transport_a_SOURCES += transport/transport.h transport/internal.h transport/launch.h \
	transport/wire.h transport/status.c transport/world.c transport/bootstrap.c \
	transport/rendezvous.c transport/control.c transport/collectives.c \
	transport/backend_self.c transport/backend_ucx.c
if HAVE_PMIX
libburst_transport_a_SOURCES += transport/bootstrap_pmix.c
endif
if HAVE_NCCL
libburst_transport_a_SOURCES += transport/backend_nccl.c
endif

check_PROGRAMS += tests/transport_worker tests/test_transport
TESTS += tests/test_transport
tests_transport_worker_SOURCES = tests/transport_worker.c tests/worker_util.h
tests_transport_worker_LDADD = libburst_transport.a $(EXTERNAL_LIBS)
tests_test_transport_SOURCES = tests/test_transport.c tests/testutil.h tests/testutil.c
tests_test_transport_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
tests_test_transport_LDADD = libburst_transport.a $(EXTERNAL_LIBS) $(CHECK_LIBS)

# A real single-node Slurm started by the test itself (skips where not root).
TESTS += tests/test_slurm.sh
EXTRA_DIST += tests/test_slurm.sh tests/slurm/start.sh tests/slurm/stop.sh tests/slurm/README.md
