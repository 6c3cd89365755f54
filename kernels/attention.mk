# kernels/attention.mk: tiled attention with running (O, lse), its tests.
