/* simt_mma.h: the tensor-core and asynchronous-copy instructions the kernels
 * use, emulated per lane for the SIMT emulator (kernels/cuda/bk_cuda.cuh
 * calls these where nvcc gets inline PTX):
 *
 *   mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32   (mma_bf16_m16n8k16)
 *   ldmatrix.sync.aligned.m8n8.{x1,x2,x4}{,.trans}.shared.b16   (ldmatrix)
 *   cp.async.{ca,cg}.shared.global with zero fill, commit_group, wait_group
 *
 * mma and ldmatrix are warp collectives over all 32 lanes; each lane's
 * registers hold the fragment elements that the PTX ISA assigns to it
 * (simt_mma.cc spells the layouts out), so a kernel whose fragments are
 * arranged wrongly computes wrong results here as it would on the GPU.
 * cp.async copies are performed when the thread waits for their group (not
 * when issued), so reading the destination before cp.async.wait_group shows
 * stale data, as it may on the GPU. */
#ifndef BURST_EMU_SIMT_MMA_H
#define BURST_EMU_SIMT_MMA_H

#include <stdint.h>

#include "emu/simt/simt_shared.h"

namespace bk_emu
{

/* d = a * b + c for the warp's 16 x 16 (row) by 16 x 8 (col) bf16 tile. */
void mma_bf16_m16n8k16(const char *file, int line, float d[4], const uint32_t a[4],
                       const uint32_t b[2], const float c[4]);

/* num (1, 2, 4) 8 x 8 matrices of b16; lanes 8j .. 8j+7 give the rows of
 * matrix j (16-byte aligned, in shared memory). */
void ldmatrix(const char *file, int line, int num, int trans, uint32_t *r,
              const sptr<const uint16_t> &row);

/* Queues a copy of `bytes` (4, 8 or 16) from global src to shared dst (in
 * the array whose data starts at dst_base), of which only the first src_bytes
 * are read (the rest zero-filled). */
void cp_async(const char *file, int line, void *dst, const void *dst_base, const void *src,
              int bytes, int src_bytes);
void cp_async_commit(void);
void cp_async_wait(int n);

template <class T>
void cp_async_to(const char *file, int line, const sptr<T> &dst, const void *src, int bytes,
                 int src_bytes)
{
    cp_async(file, line, dst.range(bytes / (int64_t)sizeof(T)), dst.base, src, bytes, src_bytes);
}

} // namespace bk_emu

#endif
