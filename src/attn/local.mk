# src/attn/local.mk: distributed attention: layouts, the mask's block-level
# needs, block-sparse patterns, the planner of the ring and its executor, the
# shared command-line description of an attention problem, the device as the
# transport sees it, a kernel's status as the engine's, a ring step as cuDNN
# SDPA calls, Ulysses groups around the ring.
libburst_attn_a_SOURCES += src/attn/seq_layout.h src/attn/seq_layout.c \
	src/attn/attn_need.h src/attn/attn_need.c src/attn/sparse_pattern.h \
	src/attn/sparse_pattern.c src/attn/ring_plan.h src/attn/ring_plan.c \
	src/attn/ring.h src/attn/ring_buffers.h src/attn/ring_buffers.c src/attn/ring_run.h src/attn/ring_run.c \
	src/attn/ring_forward.c src/attn/ring_backward.c src/attn/attn_options.h \
	src/attn/attn_options.c src/attn/device_link.h src/attn/device_link.c \
	src/attn/kernel_status.h src/attn/kernel_status.c \
	src/attn/sdpa_map.h src/attn/sdpa_map.c src/attn/ring_sdpa.h src/attn/ring_sdpa.c \
	src/attn/ulysses.h src/attn/ulysses.c
