# tests/local.mk: every test of the project, in one list. The tests stand in a
# folder per wing (tests/kernels, tests/transport, tests/io, tests/attn,
# tests/train, tests/cli, tests/build), each multi-rank worker next to the test
# that launches it; tests/lib holds what they share.
AM_TESTS_ENVIRONMENT = \
	BURST='$(abs_top_builddir)/burst'; export BURST; \
	BURST_TEST_BUILDDIR='$(abs_top_builddir)'; export BURST_TEST_BUILDDIR; \
	BURST_TEST_SRCDIR='$(abs_top_srcdir)'; export BURST_TEST_SRCDIR; \
	CK_VERBOSITY=normal; export CK_VERBOSITY; \
	LSAN_OPTIONS='suppressions=$(abs_top_srcdir)/tests/lsan.supp:print_suppressions=0'; export LSAN_OPTIONS; \
	UBSAN_OPTIONS='print_stacktrace=1:halt_on_error=1'; export UBSAN_OPTIONS; \
	OMP_NUM_THREADS=$${OMP_NUM_THREADS:-2}; export OMP_NUM_THREADS;
EXTRA_DIST += tests/lsan.supp tests/run.sh
TEST_EXTENSIONS = .sh
SH_LOG_COMPILER = /bin/sh
# The result file of every test, for tests/run.sh's summary.
list-test-results:
	@echo $(TEST_LOGS:.log=.trs)
.PHONY: list-test-results

# ------------------------------------------------------------------ tests/lib
# What the tests share, one copy each: a check suite's main (check_main), the
# buffers and random numbers of the checks (arrays, rng on util/rng.h), the
# RoPE scalings and attention masks the kernel tests cycle through
# (rope_cases.h, mask_cases.h), running `burst` and the workers, temporary
# directories (testutil), the state and exits of the multi-rank workers
# (worker_util.h), the device buffers of those that run on the device
# (worker_device.h) and the model the device workers of tests/train run
# (worker_model.h).
check_LIBRARIES = tests/lib/libburst_tests.a
tests_lib_libburst_tests_a_SOURCES = tests/lib/check_main.h tests/lib/check_main.c \
	tests/lib/arrays.h tests/lib/arrays.c tests/lib/close.h tests/lib/close.c \
	tests/lib/mask_cases.h tests/lib/rng.h tests/lib/rope_cases.h tests/lib/testutil.h \
	tests/lib/testutil.c tests/lib/worker_util.h tests/lib/worker_device.h tests/lib/worker_model.h
SUITE_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
tests_lib_libburst_tests_a_CFLAGS = $(SUITE_CFLAGS)
SUITE_LIBS = tests/lib/libburst_tests.a $(CHECK_LIBS)

# A check suite is a program, compiled with SUITE_CFLAGS, that links SUITE_LIBS
# before the libraries it tests; each link set below is one such list, named
# for the deepest library it holds. A suite whose one source is its name plus
# .c names no _SOURCES (automake's default), so that adding one is
#   check_PROGRAMS += tests/WING/test_x
#   TESTS += tests/WING/test_x
#   tests_WING_test_x_CFLAGS = $(SUITE_CFLAGS)
#   tests_WING_test_x_LDADD = $(..._SUITE_LIBS)
# (automake takes per-program flags from per-program variables only).
UTIL_SUITE_LIBS = $(SUITE_LIBS) libburst_util.a $(EXTERNAL_LIBS)
KERNEL_SUITE_LIBS = $(SUITE_LIBS) libburst_kernels.a libburst_util.a $(EXTERNAL_LIBS)
TRANSPORT_SUITE_LIBS = $(SUITE_LIBS) libburst_transport.a libburst_util.a $(EXTERNAL_LIBS)
IO_SUITE_LIBS = $(SUITE_LIBS) libburst_io.a $(EXTERNAL_LIBS)
# Every library of the engine (Makefile.am's LDADD).
ENGINE_SUITE_LIBS = $(SUITE_LIBS) $(LDADD)
# The suites of the device kernels linked with the emulator: emu/simt/
# select_emu.c ahead of the libraries and the emulator's library before the
# kernels (the CUDA builds' device suites link KERNEL_SUITE_LIBS);
# tests/kernels/dev_util is what they add to tests/lib (device buffers; a main
# that skips without a device).
DEV_SUITE_UTIL = tests/kernels/dev_util.h tests/kernels/dev_util.c
DEV_SUITE_EMU_SOURCES = $(DEV_SUITE_UTIL) emu/simt/select_emu.c
DEV_SUITE_LIBS_EMU = $(SUITE_LIBS) libburst_kernels_emu.a libburst_kernels.a libburst_util.a \
	$(EXTERNAL_LIBS) -lstdc++
# The multi-rank workers and programs linked with the emulator (no check):
# the attention's libraries, or the whole engine's.
EMU_ATTN_LIBS = libburst_attn.a libburst_transport.a libburst_kernels_emu.a libburst_kernels.a \
	libburst_util.a $(EMU_EXTERNAL_LIBS) -lstdc++
EMU_ENGINE_LIBS = libburst_plan.a libburst_train.a libburst_attn.a libburst_transport.a libburst_kernels_emu.a \
	libburst_kernels.a libburst_io.a libburst_util.a $(EMU_EXTERNAL_LIBS) -lstdc++
# The allocator wrapped (--wrap), so that a test counts or fails allocations.
WRAPPED_ALLOCATOR = -Wl,--wrap=malloc -Wl,--wrap=calloc -Wl,--wrap=realloc \
	-Wl,--wrap=aligned_alloc

# ------------------------------------------------------------------ the order
# `make -j check` starts the tests in TESTS's order (its scripts, the .sh
# tests, ahead of the programs): the slowest programs stand first, so that the
# longest are not the last to start.
TESTS += tests/train/test_train_device tests/train/test_train_device_host
if HAVE_NCCL
TESTS += tests/train/test_train_device_nccl
endif
TESTS += tests/attn/test_ring tests/train/test_train tests/train/test_lm_head_device \
	tests/kernels/test_dev_attention_emu tests/train/test_recall \
	tests/train/test_train_device_memory

# ------------------------------------------------------------------ the build
# configure names the package to install when a dependency is missing.
TESTS += tests/build/test_configure.sh
EXTRA_DIST += tests/build/test_configure.sh
# README's two commands in either order: build-aux/build.sh configures again
# when a program configure looks for appears; cuobjdump is found where
# install-deps.sh test puts it.
TESTS += tests/build/test_build_tools.sh
EXTRA_DIST += tests/build/test_build_tools.sh
# tests/run.sh's summary: a skip is no pass; CI must not skip the real Slurm.
TESTS += tests/build/test_check_summary.sh
EXTRA_DIST += tests/build/test_check_summary.sh tests/lib/check_summary.sh

# ------------------------------------------------------------------ kernels
# The tiled attention against the double-precision reference.
check_PROGRAMS += tests/kernels/test_attention
TESTS += tests/kernels/test_attention
tests_kernels_test_attention_CFLAGS = $(SUITE_CFLAGS)
tests_kernels_test_attention_LDADD = $(KERNEL_SUITE_LIBS)

# GEMM, norms, RoPE, SwiGLU, embedding, AdamW, cross-entropy.
check_PROGRAMS += tests/kernels/test_ops
TESTS += tests/kernels/test_ops
tests_kernels_test_ops_CFLAGS = $(SUITE_CFLAGS)
tests_kernels_test_ops_LDADD = $(KERNEL_SUITE_LIBS)

# The device kernels (kernels/cuda/) on the CPU: the SIMT emulator's own
# primitives, then the kernels on an emulated device queue against the
# double-precision references.
EMU_SUITE_CPPFLAGS = $(AM_CPPFLAGS) -DBK_EMULATOR $(CHECK_CFLAGS)
SIMT_SUITE_LIBS = libburst_kernels_emu.a libburst_kernels.a libburst_util.a $(SUITE_LIBS) -lm
check_PROGRAMS += tests/kernels/test_simt
TESTS += tests/kernels/test_simt
tests_kernels_test_simt_SOURCES = tests/kernels/test_simt.cc
tests_kernels_test_simt_CPPFLAGS = $(EMU_SUITE_CPPFLAGS)
tests_kernels_test_simt_LDADD = $(SIMT_SUITE_LIBS)
# The emulated runtime's checks of global memory and launch limits, each with
# a planted bug (host pointer to a kernel, write past an allocation's end,
# copy in the wrong direction, dynamic shared memory over the limit).
check_PROGRAMS += tests/kernels/test_simt_memory
TESTS += tests/kernels/test_simt_memory
tests_kernels_test_simt_memory_SOURCES = tests/kernels/test_simt_memory.cc emu/simt/select_emu.c
tests_kernels_test_simt_memory_CPPFLAGS = $(EMU_SUITE_CPPFLAGS)
tests_kernels_test_simt_memory_LDADD = $(DEV_SUITE_LIBS_EMU)

# The emulator's shared-memory race detector against kernels with a barrier
# planted missing (they live in the test alone).
check_PROGRAMS += tests/kernels/test_simt_racecheck
TESTS += tests/kernels/test_simt_racecheck
tests_kernels_test_simt_racecheck_SOURCES = tests/kernels/test_simt_racecheck.cc
tests_kernels_test_simt_racecheck_CPPFLAGS = $(EMU_SUITE_CPPFLAGS)
tests_kernels_test_simt_racecheck_LDADD = $(SIMT_SUITE_LIBS)

# The device kernels at a 1M-token sequence's index ranges: sparse buffers of
# 16 GiB, only the first and last block of each grid run.
check_PROGRAMS += tests/kernels/test_dev_1m
TESTS += tests/kernels/test_dev_1m
tests_kernels_test_dev_1m_SOURCES = tests/kernels/test_dev_1m.cc emu/simt/select_emu.c
tests_kernels_test_dev_1m_CPPFLAGS = $(EMU_SUITE_CPPFLAGS)
tests_kernels_test_dev_1m_LDADD = $(DEV_SUITE_LIBS_EMU)

# The emulator's stream modes (eager, deferred) against planted ordering bugs
# between streams and the host (they live in the test alone).
check_PROGRAMS += tests/kernels/test_simt_streams
TESTS += tests/kernels/test_simt_streams
tests_kernels_test_simt_streams_SOURCES = tests/kernels/test_simt_streams.cc emu/simt/select_emu.c
tests_kernels_test_simt_streams_CPPFLAGS = $(EMU_SUITE_CPPFLAGS)
tests_kernels_test_simt_streams_LDADD = $(DEV_SUITE_LIBS_EMU)

# The emulator's schedules (reverse, random) against planted bugs that only a
# schedule shows: an order between blocks, a lost update (they live in the
# test alone).
check_PROGRAMS += tests/kernels/test_simt_schedule
TESTS += tests/kernels/test_simt_schedule
tests_kernels_test_simt_schedule_SOURCES = tests/kernels/test_simt_schedule.cc
tests_kernels_test_simt_schedule_CPPFLAGS = $(EMU_SUITE_CPPFLAGS)
tests_kernels_test_simt_schedule_LDADD = $(SIMT_SUITE_LIBS)

# The emulator's mma and ldmatrix tests, and the attention sweep, built
# against an mma and ldmatrix that plant a wrong fragment layout when asked
# (BK_EMU_MMA_MUTANT, one per table): the script expects each mutant to fail
# both.
check_PROGRAMS += tests/kernels/test_simt_wrong_layout
TESTS += tests/kernels/test_simt_wrong_layout.sh
EXTRA_DIST += tests/kernels/test_simt_wrong_layout.sh
tests_kernels_test_simt_wrong_layout_SOURCES = tests/kernels/test_simt.cc emu/simt/simt_mma.cc
tests_kernels_test_simt_wrong_layout_CPPFLAGS = $(EMU_SUITE_CPPFLAGS) -DBK_EMU_MMA_MUTANTS
tests_kernels_test_simt_wrong_layout_LDADD = $(SIMT_SUITE_LIBS)

# One test source per device suite, linked twice: with the emulator (every
# build) and with the CUDA backend (CUDA builds; skips, exit 77, without a
# GPU).
check_PROGRAMS += tests/kernels/test_dev_ops_emu
TESTS += tests/kernels/test_dev_ops_emu
tests_kernels_test_dev_ops_emu_SOURCES = tests/kernels/test_dev_ops.c $(DEV_SUITE_EMU_SOURCES)
tests_kernels_test_dev_ops_emu_CFLAGS = $(SUITE_CFLAGS)
tests_kernels_test_dev_ops_emu_LDADD = $(DEV_SUITE_LIBS_EMU)

check_PROGRAMS += tests/kernels/test_dev_attention_emu
# (test_dev_attention_emu stands in TESTS with the slowest, at the top.)
tests_kernels_test_dev_attention_emu_SOURCES = tests/kernels/test_dev_attention.c \
	$(DEV_SUITE_EMU_SOURCES)
tests_kernels_test_dev_attention_emu_CFLAGS = $(SUITE_CFLAGS)
tests_kernels_test_dev_attention_emu_LDADD = $(DEV_SUITE_LIBS_EMU)

# The fused SDPA on the emulator's model of cuDNN, and the state kernels around it.
check_PROGRAMS += tests/kernels/test_dev_sdpa_emu
TESTS += tests/kernels/test_dev_sdpa_emu
tests_kernels_test_dev_sdpa_emu_SOURCES = tests/kernels/test_dev_sdpa.c $(DEV_SUITE_EMU_SOURCES)
tests_kernels_test_dev_sdpa_emu_CFLAGS = $(SUITE_CFLAGS)
tests_kernels_test_dev_sdpa_emu_LDADD = $(DEV_SUITE_LIBS_EMU)

check_PROGRAMS += tests/kernels/test_dev_attention_wrong_layout
tests_kernels_test_dev_attention_wrong_layout_SOURCES = tests/kernels/test_dev_attention.c \
	$(DEV_SUITE_EMU_SOURCES) emu/simt/simt_mma.cc
tests_kernels_test_dev_attention_wrong_layout_CPPFLAGS = $(AM_CPPFLAGS) -DBK_EMULATOR \
	-DBK_EMU_MMA_MUTANTS
tests_kernels_test_dev_attention_wrong_layout_CFLAGS = $(SUITE_CFLAGS)
tests_kernels_test_dev_attention_wrong_layout_LDADD = $(DEV_SUITE_LIBS_EMU)

# Streams, events, queued copies (emulator here; the GPU below).
check_PROGRAMS += tests/kernels/test_dev_streams_emu
TESTS += tests/kernels/test_dev_streams_emu
tests_kernels_test_dev_streams_emu_SOURCES = tests/kernels/test_dev_streams.c \
	$(DEV_SUITE_EMU_SOURCES)
tests_kernels_test_dev_streams_emu_CFLAGS = $(SUITE_CFLAGS)
tests_kernels_test_dev_streams_emu_LDADD = $(DEV_SUITE_LIBS_EMU)

# The caching arena in host memory and in emulated device memory.
check_PROGRAMS += tests/kernels/test_arena
TESTS += tests/kernels/test_arena
tests_kernels_test_arena_SOURCES = tests/kernels/test_arena.c $(DEV_SUITE_EMU_SOURCES)
tests_kernels_test_arena_CFLAGS = $(SUITE_CFLAGS)
tests_kernels_test_arena_LDADD = $(DEV_SUITE_LIBS_EMU)

# The device kernels' benchmark (src/bench/bench_kernels_device.c) run to the
# end on the emulated device at tiny sizes.
check_PROGRAMS += tests/kernels/test_bench_device_emu
TESTS += tests/kernels/test_bench_device_emu
tests_kernels_test_bench_device_emu_SOURCES = tests/kernels/test_bench_device_emu.c \
	src/bench/bench_kernels_device.c $(DEV_SUITE_EMU_SOURCES)
tests_kernels_test_bench_device_emu_CFLAGS = $(SUITE_CFLAGS)
tests_kernels_test_bench_device_emu_LDADD = libburst_plan.a $(DEV_SUITE_LIBS_EMU) libburst_util.a

# The device kernel tests again under the emulator's other schedules (threads
# in reverse, random orders of fixed seeds): a kernel that depends on the
# order threads or blocks run in fails there.
TESTS += tests/kernels/test_emu_schedules.sh
EXTRA_DIST += tests/kernels/test_emu_schedules.sh

if HAVE_CUDA
check_PROGRAMS += tests/kernels/test_dev_ops_cuda tests/kernels/test_dev_attention_cuda \
	tests/kernels/test_dev_streams_cuda
TESTS += tests/kernels/test_dev_ops_cuda tests/kernels/test_dev_attention_cuda \
	tests/kernels/test_dev_streams_cuda
tests_kernels_test_dev_streams_cuda_SOURCES = tests/kernels/test_dev_streams.c $(DEV_SUITE_UTIL)
tests_kernels_test_dev_streams_cuda_CFLAGS = $(SUITE_CFLAGS)
tests_kernels_test_dev_streams_cuda_LDADD = $(KERNEL_SUITE_LIBS)
tests_kernels_test_dev_ops_cuda_SOURCES = tests/kernels/test_dev_ops.c $(DEV_SUITE_UTIL)
tests_kernels_test_dev_ops_cuda_CFLAGS = $(SUITE_CFLAGS)
tests_kernels_test_dev_ops_cuda_LDADD = $(KERNEL_SUITE_LIBS)
tests_kernels_test_dev_attention_cuda_SOURCES = tests/kernels/test_dev_attention.c $(DEV_SUITE_UTIL)
tests_kernels_test_dev_attention_cuda_CFLAGS = $(SUITE_CFLAGS)
tests_kernels_test_dev_attention_cuda_LDADD = $(KERNEL_SUITE_LIBS)
endif

# cuDNN's own check (the frontend's validate, no device) of the SDPA calls the
# ring makes, for sm 80 and 90 (CUDA builds with the cuDNN frontend; skips,
# exit 77, where libcudnn cannot be loaded).
if HAVE_CUDNN_FRONTEND
check_PROGRAMS += tests/kernels/test_cudnn_validate
TESTS += tests/kernels/test_cudnn_validate
tests_kernels_test_cudnn_validate_CFLAGS = $(SUITE_CFLAGS)
tests_kernels_test_cudnn_validate_LDADD = libburst_attn.a $(KERNEL_SUITE_LIBS)
endif

# Resource budgets of the kernels, and tensor cores in the attention kernels'
# SASS (CUDA builds; both skip, exit 77, without CUDA or without cuobjdump).
TESTS += tests/kernels/test_cuda_resources.sh tests/kernels/test_cuda_sass.sh
EXTRA_DIST += tests/kernels/test_cuda_resources.sh tests/kernels/test_cuda_sass.sh

# ------------------------------------------------------------------ transport
# Point-to-point, collectives, sub-communicators, failures and the launcher,
# with real ranks (tests/transport/transport_worker) under `burst run`.
check_PROGRAMS += tests/transport/transport_worker tests/transport/test_transport
TESTS += tests/transport/test_transport
tests_transport_transport_worker_LDADD = libburst_transport.a libburst_util.a $(EXTERNAL_LIBS)
tests_transport_test_transport_CFLAGS = $(SUITE_CFLAGS)
tests_transport_test_transport_LDADD = $(TRANSPORT_SUITE_LIBS)

# The transport on device memory: staging, self copies, device collectives and
# refusals, with real ranks whose device is the SIMT emulator
# (tests/transport/transport_dev_worker).
check_PROGRAMS += tests/transport/transport_dev_worker tests/transport/test_transport_device
TESTS += tests/transport/test_transport_device
tests_transport_transport_dev_worker_SOURCES = tests/transport/transport_dev_worker.c \
	emu/simt/select_emu.c
tests_transport_transport_dev_worker_LDADD = $(EMU_ATTN_LIBS)
tests_transport_test_transport_device_CFLAGS = $(SUITE_CFLAGS)
tests_transport_test_transport_device_LDADD = $(TRANSPORT_SUITE_LIBS)

# The model of NCCL (emu/nccl/) against what NCCL documents,
# with forked ranks: a ring step posted as one group completes, the same ring
# posted call by call deadlocks and every rank reports its pending operations,
# collectives, matching order, a peer that aborts or dies.
if HAVE_NCCL
check_PROGRAMS += tests/transport/test_nccl_emu
TESTS += tests/transport/test_nccl_emu
tests_transport_test_nccl_emu_CFLAGS = $(SUITE_CFLAGS)
tests_transport_test_nccl_emu_LDADD = libburst_nccl_emu.a $(SUITE_LIBS) -lrt -lstdc++

# The model's buffers checked against the emulated runtime's record of
# allocations (the emulator and the model linked together).
check_PROGRAMS += tests/transport/test_nccl_emu_memory
TESTS += tests/transport/test_nccl_emu_memory
tests_transport_test_nccl_emu_memory_SOURCES = tests/transport/test_nccl_emu_memory.c \
	emu/simt/select_emu.c
tests_transport_test_nccl_emu_memory_CFLAGS = $(SUITE_CFLAGS)
tests_transport_test_nccl_emu_memory_LDADD = $(SUITE_LIBS) libburst_kernels_emu.a \
	libburst_kernels.a libburst_util.a $(EMU_EXTERNAL_LIBS) -lstdc++
endif

# A real single-node Slurm started by the test itself (skips where not root).
TESTS += tests/transport/test_slurm.sh
EXTRA_DIST += tests/transport/test_slurm.sh tests/transport/soak_failures.sh tests/lib/slurm/start.sh tests/lib/slurm/stop.sh \
	tests/lib/slurm/README.md
clean-local: clean-local-tests
clean-local-tests:
	-if test -d tests/slurm-state; then sh $(srcdir)/tests/lib/slurm/stop.sh tests/slurm-state; fi
	-rm -rf tests/slurm-state
.PHONY: clean-local-tests

# ------------------------------------------------------------------ util
# The option-table walker every command's options go through (util/options.c).
check_PROGRAMS += tests/util/test_options
TESTS += tests/util/test_options
tests_util_test_options_CFLAGS = $(SUITE_CFLAGS)
tests_util_test_options_LDADD = $(UTIL_SUITE_LIBS)

# ------------------------------------------------------------------ io
# The one HDF5 error policy (io/h5util.c): messages naming the file, the
# attribute and HDF5's detail; nothing printed, in any thread; the stack empty.
check_PROGRAMS += tests/io/test_h5util
TESTS += tests/io/test_h5util
tests_io_test_h5util_CFLAGS = $(SUITE_CFLAGS)
tests_io_test_h5util_LDADD = $(IO_SUITE_LIBS)

# Hugging Face safetensors files (io/safetensors.c) and training checkpoints
# in HDF5 (io/checkpoint.c).
check_PROGRAMS += tests/io/test_safetensors
TESTS += tests/io/test_safetensors
tests_io_test_safetensors_CFLAGS = $(SUITE_CFLAGS)
tests_io_test_safetensors_LDADD = $(SUITE_LIBS) libburst_io.a libburst_util.a $(EXTERNAL_LIBS)
check_PROGRAMS += tests/io/test_checkpoint
TESTS += tests/io/test_checkpoint
tests_io_test_checkpoint_CFLAGS = $(SUITE_CFLAGS)
tests_io_test_checkpoint_LDADD = $(IO_SUITE_LIBS)

# HDF5 corpora (io/corpus.c).
check_PROGRAMS += tests/io/test_corpus
TESTS += tests/io/test_corpus
tests_io_test_corpus_CFLAGS = $(SUITE_CFLAGS)
tests_io_test_corpus_LDADD = $(ENGINE_SUITE_LIBS)

# ------------------------------------------------------------------ attn
# The ring planner's schedules, as data; distributed attention with real ranks
# (tests/attn/ring_worker) under `burst run`.
# (test_ring stands in TESTS with the slowest, at the top.)
check_PROGRAMS += tests/attn/ring_worker tests/attn/test_ring_schedule tests/attn/test_ring
TESTS += tests/attn/test_ring_schedule
# The same worker on the emulated device (--device 1): the ring's buffers in
# device memory, the transport staging them (tests/attn/test_ring).
check_PROGRAMS += tests/attn/ring_worker_emu
tests_attn_ring_worker_emu_SOURCES = tests/attn/ring_worker.c emu/simt/select_emu.c
tests_attn_ring_worker_emu_LDADD = $(EMU_ATTN_LIBS)
tests_attn_test_ring_schedule_CFLAGS = $(SUITE_CFLAGS)
tests_attn_test_ring_schedule_LDADD = $(ENGINE_SUITE_LIBS)
tests_attn_test_ring_CFLAGS = $(SUITE_CFLAGS)
tests_attn_test_ring_LDADD = $(ENGINE_SUITE_LIBS)

# Block-sparse patterns written as text, and their bitmaps.
check_PROGRAMS += tests/attn/test_sparse_pattern
TESTS += tests/attn/test_sparse_pattern
tests_attn_test_sparse_pattern_CFLAGS = $(SUITE_CFLAGS)
tests_attn_test_sparse_pattern_LDADD = $(ENGINE_SUITE_LIBS)

# Memory that cannot be had is an error naming the size, not a crash: the CPU
# attention, the ring planner, a rank's messages to itself, with the
# allocator wrapped so that each allocation fails in turn.
check_PROGRAMS += tests/attn/test_out_of_memory
TESTS += tests/attn/test_out_of_memory
tests_attn_test_out_of_memory_CFLAGS = $(SUITE_CFLAGS)
tests_attn_test_out_of_memory_LDFLAGS = $(WRAPPED_ALLOCATOR)
tests_attn_test_out_of_memory_LDADD = $(ENGINE_SUITE_LIBS)

# ------------------------------------------------------------------ train
# The LM head fused with the cross-entropy loss, chunked along the sequence.
check_PROGRAMS += tests/train/test_lm_head
TESTS += tests/train/test_lm_head
tests_train_test_lm_head_CFLAGS = $(SUITE_CFLAGS)
tests_train_test_lm_head_LDADD = $(ENGINE_SUITE_LIBS)

# The same head on the emulated device: each chunk's losses come back without
# an allocation (every malloc wrapped and counted), in pieces that sum as one.
check_PROGRAMS += tests/train/test_lm_head_device
# (test_lm_head_device stands in TESTS with the slowest, at the top.)
tests_train_test_lm_head_device_SOURCES = tests/train/test_lm_head_device.c \
	$(DEV_SUITE_EMU_SOURCES)
tests_train_test_lm_head_device_CFLAGS = $(SUITE_CFLAGS)
tests_train_test_lm_head_device_LDFLAGS = -Wl,--wrap=malloc
tests_train_test_lm_head_device_LDADD = $(SUITE_LIBS) libburst_train.a libburst_kernels_emu.a \
	libburst_kernels.a libburst_util.a $(EXTERNAL_LIBS) -lstdc++

# ZeRO's AdamW (ranks: tests/train/optimizer_worker), its state on the host
# beside the emulated device (tests/train/optimizer_host_worker) and the
# learning-rate schedule.
check_PROGRAMS += tests/train/optimizer_worker tests/train/optimizer_host_worker \
	tests/train/test_optimizer
TESTS += tests/train/test_optimizer
tests_train_optimizer_host_worker_SOURCES = tests/train/optimizer_host_worker.c \
	emu/simt/select_emu.c
tests_train_optimizer_host_worker_LDADD = $(EMU_ENGINE_LIBS)
tests_train_test_optimizer_CFLAGS = $(SUITE_CFLAGS)
tests_train_test_optimizer_LDADD = $(ENGINE_SUITE_LIBS)

# The order of the HDF5 source's windows: a bijection for every seed and size.
check_PROGRAMS += tests/train/test_window_order
TESTS += tests/train/test_window_order
tests_train_test_window_order_CFLAGS = $(SUITE_CFLAGS)
tests_train_test_window_order_LDADD = $(ENGINE_SUITE_LIBS)

# `burst plan time`'s model: profiles, a ring pass and a step priced.
check_PROGRAMS += tests/plan/test_plan_time
TESTS += tests/plan/test_plan_time
tests_plan_test_plan_time_CFLAGS = $(SUITE_CFLAGS)
tests_plan_test_plan_time_LDADD = $(ENGINE_SUITE_LIBS)

# The configuration of `burst train`.
check_PROGRAMS += tests/train/test_train_config
TESTS += tests/train/test_train_config
tests_train_test_train_config_CFLAGS = $(SUITE_CFLAGS)
tests_train_test_train_config_LDADD = $(ENGINE_SUITE_LIBS)

# The associative recall task and the evaluation's choice and count of queries.
check_PROGRAMS += tests/train/test_recall
# (test_recall stands in TESTS with the slowest, at the top.)
tests_train_test_recall_CFLAGS = $(SUITE_CFLAGS)
tests_train_test_recall_LDADD = $(ENGINE_SUITE_LIBS)

# Training end to end, and the gradients against finite differences
# (tests/train/train_gradcheck, on one rank or a ring): suites whose tests
# stand in tests/train/engine/, a file per concern on a shared fixture: the
# CPU engine's (test_train.c), the emulated device's (test_train_device.c),
# its host keys' (test_train_device_host.c), its memory's
# (test_train_device_memory.c) and, where NCCL is, the emulated device's over
# the model of NCCL (test_train_device_nccl.c): programs apart so that
# `make -j` runs them side by side (in TESTS with the slowest, at the
# top).
check_PROGRAMS += tests/train/train_gradcheck tests/train/test_train \
	tests/train/test_train_device
tests_train_test_train_SOURCES = tests/train/test_train.c tests/train/engine/fixture.h \
	tests/train/engine/fixture.c tests/train/engine/ranks.c tests/train/engine/steps.c \
	tests/train/engine/resume.c tests/train/engine/corpus.c tests/train/engine/zero.c
tests_train_test_train_CFLAGS = $(SUITE_CFLAGS)
tests_train_test_train_LDADD = $(ENGINE_SUITE_LIBS)
tests_train_test_train_device_SOURCES = tests/train/test_train_device.c \
	tests/train/engine/fixture.h tests/train/engine/fixture.c tests/train/engine/device.c
tests_train_test_train_device_CFLAGS = $(SUITE_CFLAGS)
tests_train_test_train_device_LDADD = $(ENGINE_SUITE_LIBS)
check_PROGRAMS += tests/train/test_train_device_host
tests_train_test_train_device_host_SOURCES = tests/train/test_train_device_host.c \
	tests/train/engine/fixture.h tests/train/engine/fixture.c tests/train/engine/device_host.c
tests_train_test_train_device_host_CFLAGS = $(SUITE_CFLAGS)
tests_train_test_train_device_host_LDADD = $(ENGINE_SUITE_LIBS)
check_PROGRAMS += tests/train/test_train_device_memory
tests_train_test_train_device_memory_SOURCES = tests/train/test_train_device_memory.c \
	tests/train/engine/fixture.h tests/train/engine/fixture.c tests/train/engine/device_memory.c
tests_train_test_train_device_memory_CFLAGS = $(SUITE_CFLAGS)
tests_train_test_train_device_memory_LDADD = $(ENGINE_SUITE_LIBS)
if HAVE_NCCL
check_PROGRAMS += tests/train/test_train_device_nccl
tests_train_test_train_device_nccl_SOURCES = tests/train/test_train_device_nccl.c \
	tests/train/engine/fixture.h tests/train/engine/fixture.c tests/train/engine/device_nccl.c
tests_train_test_train_device_nccl_CFLAGS = $(SUITE_CFLAGS)
tests_train_test_train_device_nccl_LDADD = $(ENGINE_SUITE_LIBS)
endif

# burst itself linked with the device emulator: the engine with [train]
# device = cuda on an emulated device (tests/train/test_train_device).
check_PROGRAMS += tests/train/burst_emu
tests_train_burst_emu_SOURCES = $(burst_SOURCES) emu/simt/select_emu.c
tests_train_burst_emu_LDADD = $(EMU_ENGINE_LIBS)

# The emulated device's account of a training step (emu/simt/simt_account.h):
# a tiny step of the trainer in this process, what its account must hold, the
# counting mode's equality with the full step, and today's budget of host
# waits.
check_PROGRAMS += tests/train/test_device_account
TESTS += tests/train/test_device_account
tests_train_test_device_account_SOURCES = tests/train/test_device_account.c emu/simt/select_emu.c
tests_train_test_device_account_CFLAGS = $(SUITE_CFLAGS)
tests_train_test_device_account_LDADD = $(SUITE_LIBS) $(EMU_ENGINE_LIBS)
# The same account on the ring of 2 and 4 ranks: rank 0's host waits the
# same with 1 and 2 layers and on 2 and 4 ranks.
TESTS += tests/train/test_device_waits.sh
EXTRA_DIST += tests/train/test_device_waits.sh

# The model runner on the emulated device against the host, on 1, 2 and 4
# ranks (tests/train/model_device_worker); a kernel failing on the device in
# a step reported as a device error, not as refused arguments
# (tests/train/model_fail_worker, its own backend: the emulator's with
# failures injected).
check_PROGRAMS += tests/train/model_device_worker tests/train/model_fail_worker \
	tests/train/test_model_device
TESTS += tests/train/test_model_device
tests_train_model_device_worker_SOURCES = tests/train/model_device_worker.c emu/simt/select_emu.c
tests_train_model_device_worker_LDADD = $(EMU_ENGINE_LIBS)
tests_train_model_fail_worker_LDADD = $(EMU_ENGINE_LIBS)
tests_train_test_model_device_CFLAGS = $(SUITE_CFLAGS)
tests_train_test_model_device_LDADD = $(ENGINE_SUITE_LIBS)

# The memory the trainer reports and checks against what it allocates, counted
# by tests/train/train_memory with the allocator wrapped; allocations that
# fail; a run over [memory] limit_bytes.
check_PROGRAMS += tests/train/train_memory tests/train/test_memory
TESTS += tests/train/test_memory
tests_train_train_memory_LDFLAGS = $(WRAPPED_ALLOCATOR) -Wl,--wrap=free
tests_train_test_memory_CFLAGS = $(SUITE_CFLAGS)
tests_train_test_memory_LDADD = $(ENGINE_SUITE_LIBS)

# ------------------------------------------------------------------ cli
# The command line's promises (help, usage errors, version).
check_PROGRAMS += tests/cli/test_cli
TESTS += tests/cli/test_cli
tests_cli_test_cli_CFLAGS = $(SUITE_CFLAGS)
tests_cli_test_cli_LDADD = $(ENGINE_SUITE_LIBS)

# Each rank's share of the cores: `burst run`, OMP_NUM_THREADS, srun tasks.
check_PROGRAMS += tests/cli/test_placement
TESTS += tests/cli/test_placement
tests_cli_test_placement_CFLAGS = $(SUITE_CFLAGS)
tests_cli_test_placement_LDADD = $(SUITE_LIBS)

# `burst data`: import, synthesise, describe and validate HDF5 corpora.
TESTS += tests/cli/test_data.sh
# Hugging Face import, export and eval against transformers (the oracle venv).
TESTS += tests/train/test_hf.sh
EXTRA_DIST += tests/train/test_hf.sh tests/train/hf_oracle.py
EXTRA_DIST += tests/cli/test_data.sh tests/lib/expect.sh
