# transport/local.mk: bytes between ranks (UCX, NCCL, self, staged device
# memory), bootstrap, collectives.
libburst_transport_a_SOURCES += transport/transport.h transport/internal.h transport/launch.h \
	transport/wire.h transport/status.c transport/world.c transport/bootstrap.c \
	transport/rendezvous.c transport/control.c transport/collectives.c \
	transport/collectives_mem.c transport/alltoall.c transport/device.c transport/staging.c \
	transport/nccl_memory.c transport/backend_self.c transport/backend_ucx.c
if HAVE_PMIX
libburst_transport_a_SOURCES += transport/bootstrap_pmix.c
endif
if HAVE_NCCL
libburst_transport_a_SOURCES += transport/backend_nccl.c
endif
