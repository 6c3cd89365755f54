# kernels/cuda.mk: the device (CUDA) side of the kernels, the SIMT emulator
# that runs the same kernel sources on the CPU, and their tests (tests/kernels/).
#
# Every kernels/cuda/*.cu file is compiled twice: by nvcc for the GPU into
# libburst_kernels.a (CUDA builds only), and by the host C++ compiler as C++
# with -DBK_EMULATOR into libburst_kernels_emu.a (every build), which the
# tests in tests/kernels/ link. See doc/KERNELS.md, "Device kernels".

AM_CXXFLAGS = -std=gnu++17 -pthread -fno-exceptions -fno-rtti -fno-strict-aliasing \
	$(WARN_CXXFLAGS) $(OPT_CFLAGS) $(SAN_CFLAGS)

libburst_kernels_a_SOURCES += kernels/bf16.h
EXTRA_DIST += kernels/cuda/bk_cuda.cuh

# ---------------------------------------------------------------- the emulator
SIMT_EMU_HDRS = kernels/emu/simt.h kernels/emu/simt_types.h kernels/emu/simt_internal.h \
	kernels/emu/simt_fiber.h kernels/emu/simt_runtime.h kernels/emu/simt_shared.h \
	kernels/emu/simt_warp.h kernels/emu/simt_atomic.h kernels/emu/simt_mma.h
noinst_LIBRARIES += libburst_kernels_emu.a
libburst_kernels_emu_a_SOURCES = $(SIMT_EMU_HDRS) kernels/emu/simt_fiber.cc \
	kernels/emu/simt_runtime.cc kernels/emu/simt_shared.cc kernels/emu/simt_warp.cc \
	kernels/emu/simt_mma.cc

# ---------------------------------------------------------------- tests
EMU_TEST_CPPFLAGS = $(AM_CPPFLAGS) -DBK_EMULATOR $(CHECK_CFLAGS)

check_PROGRAMS += tests/kernels/test_simt
TESTS += tests/kernels/test_simt
tests_kernels_test_simt_SOURCES = tests/kernels/test_simt.cc
tests_kernels_test_simt_CPPFLAGS = $(EMU_TEST_CPPFLAGS)
tests_kernels_test_simt_LDADD = libburst_kernels_emu.a $(CHECK_LIBS) -lm

# The emulator's own mma test, built against an mma whose A-fragment layout is
# deliberately wrong: the test script expects it to fail.
check_PROGRAMS += tests/kernels/test_simt_wrong_layout
TESTS += tests/kernels/test_simt_wrong_layout.sh
EXTRA_DIST += tests/kernels/test_simt_wrong_layout.sh
tests_kernels_test_simt_wrong_layout_SOURCES = tests/kernels/test_simt.cc kernels/emu/simt_mma.cc
tests_kernels_test_simt_wrong_layout_CPPFLAGS = $(EMU_TEST_CPPFLAGS) -DBK_EMU_MMA_WRONG_LAYOUT
tests_kernels_test_simt_wrong_layout_LDADD = libburst_kernels_emu.a $(CHECK_LIBS) -lm
