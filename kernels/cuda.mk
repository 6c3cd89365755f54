# kernels/cuda.mk: the device (CUDA) side of the kernels (their tests are
# listed in tests/local.mk).
#
# Every kernels/cuda/*.cu file is compiled twice: by nvcc for the GPU into
# libburst_kernels.a (CUDA builds only), and by the host C++ compiler as C++
# with -DBK_EMULATOR into libburst_kernels_emu.a (every build; emu/local.mk),
# which the device kernel tests link. See doc/KERNELS.md, "Device kernels".

CLEANFILES =

# The kernel sources (kernels/cuda/*.cu) and the headers they include.
BK_CU_SRC = kernels/cuda/device_memory.cu kernels/cuda/device_streams.cu kernels/cuda/device_checks.cu \
	kernels/cuda/device_table.cu kernels/cuda/gemm.cu kernels/cuda/norm.cu \
	kernels/cuda/rope.cu kernels/cuda/swiglu.cu kernels/cuda/embedding.cu \
	kernels/cuda/adamw.cu kernels/cuda/grad_norm.cu kernels/cuda/vector.cu kernels/cuda/cross_entropy.cu \
	kernels/cuda/attention_state.cu kernels/cuda/attention_fwd.cu kernels/cuda/attention_bwd.cu \
	kernels/cuda/sdpa_state.cu
BK_CU_HDRS = kernels/cuda/bk_cuda.cuh kernels/cuda/dev_common.cuh kernels/cuda/attention_tile.cuh \
	kernels/attention_tile.h \
	kernels/bf16.h kernels/device.h kernels/device_ops.h kernels/kernels_common.h \
	kernels/shared_math.h kernels/ops_math.h kernels/attention_math.h kernels/attention.h \
	kernels/ops.h kernels/sdpa.h kernels/sdpa_graph.h kernels/cuda/cudnn_sdpa.h
EXTRA_DIST += $(BK_CU_SRC) kernels/cuda/bk_cuda.cuh kernels/cuda/dev_common.cuh \
	kernels/cuda/attention_tile.cuh

# The entry points' side of the device backend (kernels/device_ops.h): which
# backend a BK_DEVICE queue reaches is chosen by what is linked.
libburst_kernels_a_SOURCES += kernels/bf16.h kernels/device.h kernels/device_ops.h \
	kernels/attention_tile.h \
	kernels/device.c kernels/cpu/bf16_ops.c kernels/cpu/attention_merge.c
# The fused SDPA's contract, its description in cuDNN's terms, its entry points
# and host references (kernels/sdpa.h).
libburst_kernels_a_SOURCES += kernels/sdpa.h kernels/sdpa.c kernels/sdpa_graph.h \
	kernels/sdpa_graph.c kernels/cuda/cudnn_sdpa.h
if HAVE_CUDA
libburst_kernels_a_SOURCES += kernels/cuda/select_cuda.c $(BK_CU_SRC)
BK_CU_NVCC_OBJS = $(BK_CU_SRC:.cu=.$(OBJEXT))
$(BK_CU_NVCC_OBJS): $(BK_CU_HDRS)
# Each kernel object is compiled with ptxas's resource report (-Xptxas -v:
# registers, stack frame, spills, shared memory per kernel and architecture),
# kept beside it as OBJECT.ptxas; anything else nvcc prints is shown.
# kernels/cuda/resource-usage.txt gathers them for
# tests/kernels/test_cuda_resources.sh.
BK_NVCC_REPORT = $(NVCC_COMPILE) -Xptxas -v -c -o $@ $< 2>$@.ptxas; st=$$?; \
	grep -v -e '^ptxas info' -e 'bytes stack frame' $@.ptxas >&2; exit $$st
kernels/cuda/device_memory.$(OBJEXT): kernels/cuda/device_memory.cu
	$(AM_V_GEN)$(BK_NVCC_REPORT)
kernels/cuda/device_streams.$(OBJEXT): kernels/cuda/device_streams.cu
	$(AM_V_GEN)$(BK_NVCC_REPORT)
kernels/cuda/device_checks.$(OBJEXT): kernels/cuda/device_checks.cu
	$(AM_V_GEN)$(BK_NVCC_REPORT)
kernels/cuda/device_table.$(OBJEXT): kernels/cuda/device_table.cu
	$(AM_V_GEN)$(BK_NVCC_REPORT)
kernels/cuda/gemm.$(OBJEXT): kernels/cuda/gemm.cu
	$(AM_V_GEN)$(BK_NVCC_REPORT)
kernels/cuda/norm.$(OBJEXT): kernels/cuda/norm.cu
	$(AM_V_GEN)$(BK_NVCC_REPORT)
kernels/cuda/rope.$(OBJEXT): kernels/cuda/rope.cu
	$(AM_V_GEN)$(BK_NVCC_REPORT)
kernels/cuda/swiglu.$(OBJEXT): kernels/cuda/swiglu.cu
	$(AM_V_GEN)$(BK_NVCC_REPORT)
kernels/cuda/embedding.$(OBJEXT): kernels/cuda/embedding.cu
	$(AM_V_GEN)$(BK_NVCC_REPORT)
kernels/cuda/adamw.$(OBJEXT): kernels/cuda/adamw.cu
	$(AM_V_GEN)$(BK_NVCC_REPORT)
kernels/cuda/grad_norm.$(OBJEXT): kernels/cuda/grad_norm.cu
	$(AM_V_GEN)$(BK_NVCC_REPORT)
kernels/cuda/vector.$(OBJEXT): kernels/cuda/vector.cu
	$(AM_V_GEN)$(BK_NVCC_REPORT)
kernels/cuda/cross_entropy.$(OBJEXT): kernels/cuda/cross_entropy.cu
	$(AM_V_GEN)$(BK_NVCC_REPORT)
kernels/cuda/attention_state.$(OBJEXT): kernels/cuda/attention_state.cu
	$(AM_V_GEN)$(BK_NVCC_REPORT)
kernels/cuda/attention_fwd.$(OBJEXT): kernels/cuda/attention_fwd.cu
	$(AM_V_GEN)$(BK_NVCC_REPORT)
kernels/cuda/attention_bwd.$(OBJEXT): kernels/cuda/attention_bwd.cu
	$(AM_V_GEN)$(BK_NVCC_REPORT)
kernels/cuda/sdpa_state.$(OBJEXT): kernels/cuda/sdpa_state.cu
	$(AM_V_GEN)$(BK_NVCC_REPORT)
noinst_DATA = kernels/cuda/resource-usage.txt
kernels/cuda/resource-usage.txt: $(BK_CU_NVCC_OBJS)
	@for o in $(BK_CU_NVCC_OBJS); do \
	    test -f $$o.ptxas || { rm -f $$o && $(MAKE) $(AM_MAKEFLAGS) $$o; } || exit 1; \
	done
	$(AM_V_GEN)cat $(BK_CU_NVCC_OBJS:=.ptxas) > $@.tmp && mv $@.tmp $@
CLEANFILES += $(BK_CU_NVCC_OBJS:=.ptxas) kernels/cuda/resource-usage.txt
else
libburst_kernels_a_SOURCES += kernels/device_none.c
endif

# cuDNN's fused attention (kernels/sdpa.h), CUDA builds only: over the cuDNN
# frontend where configure found it, else a stand-in that says the build has
# none. The frontend is C++ that needs exceptions and RTTI (its graph casts
# nodes with dynamic_pointer_cast), so its one source takes flags of its own
# rather than AM_CXXFLAGS: it is the source of a library of its own, whose
# object is added to libburst_kernels.a. It is not a .cu, so the emulator
# builds never compile it. The defines are the frontend's options:
# libcudnn loaded at run time (nothing of cuDNN linked, so a CUDA build runs
# without it), errors returned and not thrown, no JSON library.
# -Og -fno-var-tracking: its code builds graphs and queues them, a few calls a
# step, and optimizing the frontend's inline C++ (150,000 lines preprocessed)
# for speed, and tracking its variables for -g, buys nothing: 30-40 s of CPU on
# this project's machines so, 90 s at -O3 -g.
if HAVE_CUDA
if HAVE_CUDNN_FRONTEND
noinst_LIBRARIES += libburst_cudnn_sdpa.a
libburst_cudnn_sdpa_a_SOURCES = kernels/cuda/cudnn_sdpa.cc kernels/cuda/cudnn_sdpa.h kernels/sdpa.h
libburst_cudnn_sdpa_a_CPPFLAGS = $(AM_CPPFLAGS) $(CUDNN_FRONTEND_CPPFLAGS) \
	-DNV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING -DNV_CUDNN_DISABLE_EXCEPTION \
	-DCUDNN_FRONTEND_SKIP_JSON_LIB
libburst_cudnn_sdpa_a_CXXFLAGS = $(CXXFLAGS_WITH_RUNTIME) -Og -fno-var-tracking
libburst_kernels_a_LIBADD = $(libburst_cudnn_sdpa_a_OBJECTS)
else
libburst_kernels_a_SOURCES += kernels/cuda/cudnn_sdpa_none.c kernels/cuda/cudnn_sdpa.h kernels/sdpa.h
endif
endif
