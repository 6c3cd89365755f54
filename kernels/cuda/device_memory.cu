/* device_memory.cu: the device backend's memory: allocation, copies between
 * host and device, stream-ordered scratch, waiting for a stream, and the
 * check that buffers given with a device queue are device memory.
 *
 * Under nvcc these are the CUDA runtime's calls; in the SIMT emulator device
 * memory is host memory, every launch has finished when it returns, and copies
 * wait in their stream's queue until something needs them
 * (kernels/emu/simt_stream.h). Streams, events and page-locked host memory are
 * in device_streams.cu. */
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/dev_common.cuh"

#ifdef BK_EMULATOR

extern "C" int BK_DEV_FN(available)(void)
{
    return 1;
}

/* One device, whose memory is the host's: nothing to choose, nothing to report. */
extern "C" bk_status BK_DEV_FN(use)(int index, int *count)
{
    (void)index;
    *count = 1;
    return BK_OK;
}

extern "C" bk_status BK_DEV_FN(mem_info)(size_t *free_bytes, size_t *total_bytes)
{
    (void)free_bytes, (void)total_bytes;
    return BK_ERR_UNSUPPORTED;
}

extern "C" bk_status BK_DEV_FN(malloc)(size_t bytes, void **p)
{
    if (p == NULL) return BK_ERR_ARG;
    *p = NULL;
    if (bytes == 0) return BK_OK;
    /* cudaMalloc's alignment (256 bytes), so that code relying on it is tested */
    *p = aligned_alloc(256, (bytes + 255) / 256 * 256);
    return *p ? BK_OK : BK_ERR_DEVICE;
}

/* As cudaFree, which waits for the device: no queued copy may touch p after. */
extern "C" bk_status BK_DEV_FN(free)(void *p)
{
    if (p != NULL) bk_emu::flush_all();
    free(p);
    return BK_OK;
}

/* Copies are queued on the stream (simt_stream.h); one to or from the host
 * then runs the queue, itself included, as the GPU's blocking copy waits. */
extern "C" bk_status BK_DEV_FN(copy)(const bk_queue *q, void *dst, const void *src, size_t bytes,
                                     int dir)
{
    if (bk_emu::stream_enqueue_copy(q->stream, dst, src, bytes) != 0) return BK_ERR_DEVICE;
    if (dir != BK_COPY_DEVICE_TO_DEVICE) bk_emu::stream_flush(q->stream);
    return BK_OK;
}

extern "C" bk_status BK_DEV_FN(sync)(const bk_queue *q)
{
    bk_emu::stream_flush(q->stream);
    return BK_OK;
}

extern "C" bk_status BK_DEV_FN(scratch)(const bk_queue *q, size_t bytes, void **p)
{
    (void)q;
    return BK_DEV_FN(malloc)(bytes, p);
}

/* As cudaFreeAsync: after what q's stream holds. */
extern "C" void BK_DEV_FN(scratch_free)(const bk_queue *q, void *p)
{
    bk_emu::stream_flush(q->stream);
    free(p);
}

extern "C" bk_status BK_DEV_FN(check_ptrs)(const void *const *ptrs, int n)
{
    (void)ptrs, (void)n;
    return BK_OK;
}

#else /* CUDA */

static cudaStream_t stream_of(const bk_queue *q)
{
    return static_cast<cudaStream_t>(q->stream);
}

/* BK_OK, or BK_ERR_DEVICE after clearing the (non-sticky) error */
static bk_status status_of(cudaError_t e)
{
    if (e == cudaSuccess) return BK_OK;
    (void)cudaGetLastError();
    return BK_ERR_DEVICE;
}

extern "C" int BK_DEV_FN(available)(void)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    return n > 0;
}

extern "C" bk_status BK_DEV_FN(use)(int index, int *count)
{
    bk_status st = status_of(cudaGetDeviceCount(count));
    if (st != BK_OK || *count < 1) return st != BK_OK ? st : BK_ERR_DEVICE;
    return status_of(cudaSetDevice(index % *count));
}

extern "C" bk_status BK_DEV_FN(mem_info)(size_t *free_bytes, size_t *total_bytes)
{
    return status_of(cudaMemGetInfo(free_bytes, total_bytes));
}

extern "C" bk_status BK_DEV_FN(malloc)(size_t bytes, void **p)
{
    if (p == NULL) return BK_ERR_ARG;
    *p = NULL;
    if (bytes == 0) return BK_OK;
    return status_of(cudaMalloc(p, bytes));
}

extern "C" bk_status BK_DEV_FN(free)(void *p)
{
    return p ? status_of(cudaFree(p)) : BK_OK;
}

extern "C" bk_status BK_DEV_FN(copy)(const bk_queue *q, void *dst, const void *src, size_t bytes,
                                     int dir)
{
    if (bytes == 0) return BK_OK;
    cudaMemcpyKind kind = dir == BK_COPY_HOST_TO_DEVICE   ? cudaMemcpyHostToDevice
                          : dir == BK_COPY_DEVICE_TO_HOST ? cudaMemcpyDeviceToHost
                                                          : cudaMemcpyDeviceToDevice;
    bk_status st = status_of(cudaMemcpyAsync(dst, src, bytes, kind, stream_of(q)));
    if (st != BK_OK || dir == BK_COPY_DEVICE_TO_DEVICE) return st;
    return status_of(cudaStreamSynchronize(stream_of(q)));
}

extern "C" bk_status BK_DEV_FN(sync)(const bk_queue *q)
{
    return status_of(cudaStreamSynchronize(stream_of(q)));
}

extern "C" bk_status BK_DEV_FN(scratch)(const bk_queue *q, size_t bytes, void **p)
{
    *p = NULL;
    if (bytes == 0) return BK_OK;
    return status_of(cudaMallocAsync(p, bytes, stream_of(q)));
}

extern "C" void BK_DEV_FN(scratch_free)(const bk_queue *q, void *p)
{
    if (p) (void)cudaFreeAsync(p, stream_of(q));
}

extern "C" bk_status BK_DEV_FN(check_ptrs)(const void *const *ptrs, int n)
{
    for (int i = 0; i < n; i++) {
        if (ptrs[i] == NULL) continue;
        cudaPointerAttributes a;
        if (cudaPointerGetAttributes(&a, ptrs[i]) != cudaSuccess) {
            (void)cudaGetLastError(); /* no device, no driver: not served here */
            return BK_ERR_UNSUPPORTED;
        }
        if (a.type != cudaMemoryTypeDevice && a.type != cudaMemoryTypeManaged)
            return BK_ERR_UNSUPPORTED;
    }
    return BK_OK;
}

#endif
