/* bk_cuda.cuh: the one header every kernel source of kernels/cuda/ includes,
 * so that the same text compiles with nvcc (for the GPU) and with the host
 * C++ compiler for the SIMT emulator (-x c++ -DBK_EMULATOR, see
 * emu/simt/simt.h). What differs between the two lives here and only here:
 *
 *   BK_DEV_FN(name)     a launcher's external name: bk_cuda_name / bk_emu_name
 *   BK_LAUNCH(k, grid, block, smem, stream, args...)
 *                       launches kernel k; evaluates to a bk_status (a failed
 *                       launch's message kept for bk_kernel_error)
 *   BK_LAUNCH_NAMED(name, k, ...)  the same, k a pointer to a kernel (a template
 *                       instance), name what the emulator's messages call it
 *   BK_FOOTPRINT(read, written), BK_FOOTPRINT_TILES(read, written)
 *                       the bytes of global memory the next launch reads and
 *                       writes, for the emulator's account (nothing under nvcc)
 *   bk_allow_dynamic_smem(kernel, bytes)
 *                       cudaFuncSetAttribute(MaxDynamicSharedMemorySize), which
 *                       a launch with over 48 KiB of it needs (the emulator too)
 *   BK_CUDA(call)       a CUDA runtime call's bk_status, its failure kept for
 *                       bk_kernel_error (CUDA only)
 *   BK_SHARED(T, a, n)  a __shared__ array T a[n] (bounds-checked in the emulator)
 *   BK_SHARED_DYN(T, a) the launch's dynamic shared memory as T a[]
 *   BK_SPTR(T)          a pointer into shared memory (one declarator per
 *                       declaration: under nvcc it is `T *`); BK_SPTR_CAST(U, p)
 *   BK_LOAD_GLOBAL(V, p)  the vector V (float4, uint4) at global address p; the
 *                       emulator checks its alignment and that it lies inside
 *                       one live device allocation
 *   bk_mma_bf16_16816, bk_ldmatrix_x{1,2,4}[_trans], bk_cp_async16,
 *   bk_cp_async_commit, bk_cp_async_wait(N)
 *                       inline PTX under nvcc, emulated per lane otherwise.
 *
 * Everything else in a kernel source is plain CUDA C (#pragma unroll
 * included: the emulator build ignores it). */
#ifndef BURST_KERNELS_CUDA_BK_CUDA_CUH
#define BURST_KERNELS_CUDA_BK_CUDA_CUH

#include <stdint.h>

#include "kernels/device_ops.h"
#include "kernels/kernels_common.h"

#ifdef BK_EMULATOR
#include "emu/simt/simt.h"
#include "emu/simt/simt_account.h"
#include "emu/simt/simt_stream.h"
#else
#include <cuda_runtime.h>
#endif

/* ---------------------------------------------------------------- names, launch */
#ifdef BK_EMULATOR
#define BK_DEV_FN(name) bk_emu_##name
/* BK_OK when this process may call the emulated runtime (bk_emu::runtime_owned
 * says why not) and no queued kernel has failed (bk_emu::sticky_error), else
 * BK_ERR_DEVICE with call's failure kept for bk_kernel_error. */
static inline bk_status bk_emu_runtime(const char *call)
{
    char why[1200];
    if (!bk_emu::runtime_owned(why, sizeof why) || bk_emu::sticky_error(why, sizeof why))
        return bk_device_failed(call, why);
    return BK_OK;
}
/* BK_OK when a stream call went well (rc 0), else BK_ERR_DEVICE with the
 * sticky error queued work left (rc -1) or the call's own error (-2: a
 * hazard, or the work failed; simt_stream.h). */
static inline bk_status bk_emu_ran(int rc, const char *call)
{
    if (rc == 0) return BK_OK;
    char why[1200] = "queued work failed";
    if (rc == -2)
        snprintf(why, sizeof why, "%s", bk_emu::last_error());
    else
        bk_emu::sticky_error(why, sizeof why);
    return bk_device_failed(call, why);
}
static inline bk_status bk_launch_status(int rc)
{
    return bk_emu_ran(rc, "kernel launch");
}
/* A host wait of the kind for the account (emu/simt/simt_account.h), in the
 * entry point the call came through (bk_device_last_call). */
static inline void bk_emu_note_wait(bk_emu_wait_kind kind)
{
    bk_device_call c = bk_device_last_call();
    bk_emu::account_wait(kind, c.entry, c.caller);
}
/* Launches kernel with args converted once to its parameters' types, after
 * checking that every pointer among them is device memory
 * (bk_emu::check_kernel_arguments) and the launch's configuration: at once,
 * after what the stream has queued, or queued on the stream
 * (bk_emu::streams_deferred, simt_stream.h). */
template <class... P, class... A>
static inline int bk_emu_launch_kernel(const char *name, void (*kernel)(P...), dim3 grid,
                                       dim3 block, size_t smem, void *stream, A &&...args)
{
    bk_emu::footprint fp = bk_emu::take_footprint();
    std::tuple<typename std::decay<P>::type...> params(std::forward<A>(args)...);
    if (bk_emu::check_kernel_arguments(name, params) != 0) return -2;
    const void *id = reinterpret_cast<const void *>(kernel);
    if (bk_emu::check_launch_config(name, id, grid, block, smem) != 0) return -2;
    std::vector<bk_emu::access> acc = bk_emu::accesses_of(params);
    bk_emu::account_launch(name, fp);
    int run = !(fp.arithmetic && bk_emu_account_skipping()); /* BK_EMU_COUNT=skip */
    return bk_emu::stream_launch(stream, name, acc.data(), (int)acc.size(), [=]() {
        if (!run) return 0;
        return bk_emu::launch(name, id, grid, block, smem, [&]() { std::apply(kernel, params); });
    });
}
/* In a forked child of the runtime's owner a launch fails, as on a GPU. */
#define BK_LAUNCH(kernel, grid, block, smem, stream, ...)                                          \
    BK_LAUNCH_NAMED(#kernel, kernel, grid, block, smem, stream, ##__VA_ARGS__)
#define BK_LAUNCH_NAMED(name, kernel, grid, block, smem, stream, ...)                              \
    (bk_emu_runtime("kernel launch") != BK_OK                                                      \
         ? BK_ERR_DEVICE                                                                           \
         : bk_launch_status(bk_emu_launch_kernel((name), (kernel), (grid), (block), (smem),        \
                                                 (stream), ##__VA_ARGS__)))
#else
#define BK_DEV_FN(name) bk_cuda_##name
/* BK_OK, or BK_ERR_DEVICE after clearing the (non-sticky) error, with call
 * and CUDA's error string kept for bk_kernel_error. */
static inline bk_status bk_cuda_status(cudaError_t e, const char *call)
{
    if (e == cudaSuccess) return BK_OK;
    (void)cudaGetLastError();
    return bk_device_failed(call, cudaGetErrorString(e));
}
#define BK_CUDA(call)   bk_cuda_status((call), #call)
static inline bk_status bk_launch_status(void)
{
    return bk_cuda_status(cudaGetLastError(), "kernel launch");
}
#define BK_LAUNCH(kernel, grid, block, smem, stream, ...)                                          \
    (kernel<<<(grid), (block), (smem), static_cast<cudaStream_t>(stream)>>>(__VA_ARGS__),          \
     bk_launch_status())
#define BK_LAUNCH_NAMED(name, kernel, grid, block, smem, stream, ...)                              \
    ((void)(name), BK_LAUNCH(kernel, grid, block, smem, stream, __VA_ARGS__))
#endif

/* ---------------------------------------------------------------- footprints */
/* BK_FOOTPRINT(read, written), just before a launch: the bytes of global
 * memory it reads and writes, computed from the launcher's arguments, each
 * operand's elements counted once (the least traffic the call needs; passes
 * over the same data and tiles read again are not counted). The emulator's
 * account sums them by kernel (emu/simt/simt_account.h); BK_FOOTPRINT_TILES
 * marks a kernel of tensor-core tiles, which BK_EMU_COUNT=skip counts without
 * running. Under nvcc they compute nothing that is kept. */
#ifdef BK_EMULATOR
#define BK_FOOTPRINT(read, written)                                                                \
    bk_emu::declare_footprint((int64_t)(read), (int64_t)(written), 0, 0)
#define BK_FOOTPRINT_TILES(read, written)                                                          \
    bk_emu::declare_footprint((int64_t)(read), (int64_t)(written), 0, 1)
#else
#define BK_FOOTPRINT(read, written)       ((void)(read), (void)(written))
#define BK_FOOTPRINT_TILES(read, written) ((void)(read), (void)(written))
#endif

/* ---------------------------------------------------------------- kernel attributes */
#ifdef BK_EMULATOR
static inline bk_status bk_allow_dynamic_smem(const void *kernel, size_t bytes)
{
    return bk_emu::func_set_max_dynamic_smem(kernel, bytes) == 0
               ? BK_OK
               : bk_device_failed("cudaFuncSetAttribute",
                                  bk_emu::arch() == 90 ? "invalid value (over sm_90's 227 KiB)"
                                                       : "invalid value (over sm_80's 163 KiB)");
}
#else
static inline bk_status bk_allow_dynamic_smem(const void *kernel, size_t bytes)
{
    return BK_CUDA(
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
}
#endif

/* ---------------------------------------------------------------- shared memory */
#ifdef BK_EMULATOR
template <class V> static inline V bk_emu_load_global(const void *p, const char *file, int line)
{
    bk_emu::check_global_read(p, sizeof(V), alignof(V), file, line);
    return *static_cast<const V *>(p);
}
#define BK_LOAD_GLOBAL(V, p) bk_emu_load_global<V>((p), __FILE__, __LINE__)
#else
#define BK_LOAD_GLOBAL(V, p) (*reinterpret_cast<const V *>(p))
#endif

#ifndef BK_EMULATOR
#define BK_SHARED(T, name, count) __shared__ T name[count]
#define BK_SHARED_DYN(T, name)                                                                     \
    extern __shared__ __align__(16) unsigned char bk_dyn_smem_[];                                  \
    T *name = reinterpret_cast<T *>(bk_dyn_smem_)
#define BK_SPTR(T)         T *
#define BK_SPTR_CAST(U, p) reinterpret_cast<U *>(p)
#endif

/* ---------------------------------------------------------------- tensor cores */
#ifdef BK_EMULATOR
#define bk_mma_bf16_16816(d, a, b, c) bk_emu::mma_bf16_m16n8k16(__FILE__, __LINE__, d, a, b, c)
#define bk_ldmatrix_x1(r, p)          bk_emu::ldmatrix(__FILE__, __LINE__, 1, 0, r, p)
#define bk_ldmatrix_x2(r, p)          bk_emu::ldmatrix(__FILE__, __LINE__, 2, 0, r, p)
#define bk_ldmatrix_x4(r, p)          bk_emu::ldmatrix(__FILE__, __LINE__, 4, 0, r, p)
#define bk_ldmatrix_x1_trans(r, p)    bk_emu::ldmatrix(__FILE__, __LINE__, 1, 1, r, p)
#define bk_ldmatrix_x2_trans(r, p)    bk_emu::ldmatrix(__FILE__, __LINE__, 2, 1, r, p)
#define bk_ldmatrix_x4_trans(r, p)    bk_emu::ldmatrix(__FILE__, __LINE__, 4, 1, r, p)
#define bk_cp_async16(dst, src, src_bytes)                                                         \
    bk_emu::cp_async_to(__FILE__, __LINE__, (dst), (src), 16, (src_bytes))
#define bk_cp_async_commit() bk_emu::cp_async_commit()
#define bk_cp_async_wait(n)  bk_emu::cp_async_wait(n)
#else
/* d = a * b + c, m16n8k16, a row-major bf16, b column-major bf16, fp32 c and d */
static __device__ __forceinline__ void bk_mma_bf16_16816(float d[4], const uint32_t a[4],
                                                         const uint32_t b[2], const float c[4])
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%11,%12,%13};\n"
                 : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]),
                   "f"(c[1]), "f"(c[2]), "f"(c[3]));
}

static __device__ __forceinline__ unsigned bk_smem_addr(const void *p)
{
    return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

static __device__ __forceinline__ void bk_ldmatrix_x1(uint32_t r[1], const uint16_t *p)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%0}, [%1];\n"
                 : "=r"(r[0])
                 : "r"(bk_smem_addr(p)));
}
static __device__ __forceinline__ void bk_ldmatrix_x2(uint32_t r[2], const uint16_t *p)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];\n"
                 : "=r"(r[0]), "=r"(r[1])
                 : "r"(bk_smem_addr(p)));
}
static __device__ __forceinline__ void bk_ldmatrix_x4(uint32_t r[4], const uint16_t *p)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(bk_smem_addr(p)));
}
static __device__ __forceinline__ void bk_ldmatrix_x1_trans(uint32_t r[1], const uint16_t *p)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x1.trans.shared.b16 {%0}, [%1];\n"
                 : "=r"(r[0])
                 : "r"(bk_smem_addr(p)));
}
static __device__ __forceinline__ void bk_ldmatrix_x2_trans(uint32_t r[2], const uint16_t *p)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];\n"
                 : "=r"(r[0]), "=r"(r[1])
                 : "r"(bk_smem_addr(p)));
}
static __device__ __forceinline__ void bk_ldmatrix_x4_trans(uint32_t r[4], const uint16_t *p)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(bk_smem_addr(p)));
}

/* 16 bytes global -> shared, of which src_bytes are read and the rest zeroed */
static __device__ __forceinline__ void bk_cp_async16(void *dst, const void *src, int src_bytes)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(bk_smem_addr(dst)),
                 "l"(src), "r"(src_bytes));
}
static __device__ __forceinline__ void bk_cp_async_commit(void)
{
    asm volatile("cp.async.commit_group;\n" ::);
}
#define bk_cp_async_wait(n) asm volatile("cp.async.wait_group %0;\n" ::"n"(n))
#endif

#endif
