# emu/local.mk: the emulator, a wing of test infrastructure beside kernels/:
# the SIMT emulator (emu/simt/) that runs the CUDA kernel sources on the CPU,
# and the model of NCCL (emu/nccl/) for emulated multi-GPU nodes. Only the
# tests and the programs linked with the emulator link them (tests/local.mk);
# `burst` does not. See doc/KERNELS.md, "The SIMT emulator".

# ---------------------------------------------------------------- the SIMT emulator
# The kernel sources (BK_CU_SRC, BK_CU_HDRS: kernels/cuda.mk) include
# emu/simt/simt.h under -DBK_EMULATOR (kernels/cuda/bk_cuda.cuh).
SIMT_EMU_HDRS = emu/simt/simt.h emu/simt/simt_types.h emu/simt/simt_internal.h \
	emu/simt/simt_fiber.h emu/simt/simt_runtime.h emu/simt/simt_shared.h \
	emu/simt/simt_warp.h emu/simt/simt_atomic.h emu/simt/simt_mma.h \
	emu/simt/simt_stream.h emu/simt/simt_memory.h emu/simt/simt_account.h
noinst_LIBRARIES += libburst_kernels_emu.a
libburst_kernels_emu_a_SOURCES = $(SIMT_EMU_HDRS) emu/simt/simt_fiber.cc \
	emu/simt/simt_runtime.cc emu/simt/simt_shared.cc emu/simt/simt_warp.cc \
	emu/simt/simt_mma.cc emu/simt/simt_stream.cc emu/simt/simt_memory.cc \
	emu/simt/simt_account.cc
# emu/simt/select_emu.c, which makes the emulator a program's device backend,
# is not in the library: the programs on the emulator name it among their
# sources (tests/local.mk).
# The kernel sources compiled as C++ for the emulator: the same text nvcc
# compiles, with -DBK_EMULATOR (emu/simt/simt.h), as .eo objects.
BK_CU_EMU_OBJS = $(BK_CU_SRC:.cu=.eo)
# The model of cuDNN's fused SDPA the emulated device runs instead of cuDNN
# (emu/cudnn/sdpa_model.cu, device code like the kernels'; its checks:
# tests/kernels/test_dev_sdpa.c).
BK_CUDNN_EMU_OBJS = emu/cudnn/sdpa_model.eo
EXTRA_DIST += emu/cudnn/sdpa_model.cu
libburst_kernels_emu_a_LIBADD = $(BK_CU_EMU_OBJS) $(BK_CUDNN_EMU_OBJS)
libburst_kernels_emu_a_DEPENDENCIES = $(BK_CU_EMU_OBJS) $(BK_CUDNN_EMU_OBJS)
SUFFIXES += .eo
BK_EMU_CXXCOMPILE = $(CXX) -x c++ -DBK_EMULATOR $(DEFS) $(DEFAULT_INCLUDES) $(INCLUDES) \
	$(AM_CPPFLAGS) $(CPPFLAGS) $(AM_CXXFLAGS) -Wno-unknown-pragmas $(CXXFLAGS)
.cu.eo:
	@$(MKDIR_P) $(@D)
	$(AM_V_CXX)$(BK_EMU_CXXCOMPILE) -c -o $@ $<
$(BK_CU_EMU_OBJS) $(BK_CUDNN_EMU_OBJS): $(BK_CU_HDRS) $(SIMT_EMU_HDRS)
CLEANFILES += $(BK_CU_EMU_OBJS) $(BK_CUDNN_EMU_OBJS)

# ---------------------------------------------------------------- the model of NCCL
# A model of NCCL, and of the CUDA runtime calls around it, between the
# processes of one machine (emu/nccl/: NCCL's documented semantics, strict
# where they allow either behaviour), for programs linked with the emulator
# instead of libnccl. It needs NCCL's header for the signatures. Its own
# checks: tests/transport/test_nccl_emu. It catches allocation failures in its
# worker threads, so it keeps C++ exceptions. Its files are the sections of
# one model (emu/nccl/nccl_emu_internal.h says which holds what).
NCCL_EMU_SRC = emu/nccl/nccl_emu_internal.h emu/nccl/nccl_emu_process.cc \
	emu/nccl/nccl_emu_comm.cc emu/nccl/nccl_emu_ops.cc emu/nccl/nccl_emu_stream.cc \
	emu/nccl/nccl_emu_check.cc emu/nccl/nccl_emu_api.cc
if HAVE_NCCL
noinst_LIBRARIES += libburst_nccl_emu.a
libburst_nccl_emu_a_SOURCES = $(NCCL_EMU_SRC)
libburst_nccl_emu_a_CXXFLAGS = $(CXXFLAGS_WITH_RUNTIME)
endif
