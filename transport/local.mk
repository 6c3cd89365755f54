# transport/local.mk: bytes between ranks (UCX, NCCL, self), bootstrap, collectives.
libburst_transport_a_SOURCES += transport/transport.h transport/status.c
