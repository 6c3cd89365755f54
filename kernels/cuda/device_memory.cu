/* device_memory.cu: the device backend's memory: allocation, copies between
 * host and device, stream-ordered scratch, waiting for a stream, and the
 * check that buffers given with a device queue are device memory.
 *
 * Under nvcc these are the CUDA runtime's calls; in the SIMT emulator device
 * memory is host memory, every launch has finished when it returns, and copies
 * wait in their stream's queue until something needs them
 * (emu/simt/simt_stream.h). Streams, events and page-locked host memory are
 * in device_streams.cu.
 *
 * Scratch of a queue with an arena is a piece of that arena, so that no
 * kernel of a training step calls the runtime. The piece goes back to the
 * arena as soon as its kernels are queued, and the next scratch may be the
 * same memory while they have not run yet. That is safe because one thread
 * owns a queue and its arena, and every user of a piece of scratch is queued
 * on that queue's stream, which runs its work in order: the next user's
 * kernels start after the last one's have ended. */
#include <stdlib.h>
#include <string.h>

#include "kernels/arena.h"
#include "kernels/cuda/dev_common.cuh"

/* The scratch of a queue with an arena (see the top of the file). */
static bk_status arena_scratch(const bk_queue *q, size_t bytes, void **p)
{
    *p = bytes ? bk_arena_alloc(q->arena, bytes) : NULL;
    return *p || !bytes ? BK_OK : BK_ERR_NOMEM;
}

extern "C" size_t BK_DEV_FN(scratch_bytes)(int64_t rows, int64_t width, int64_t sqnorm_elements)
{
    size_t norm = BK_DEV_FN(rmsnorm_scratch_bytes)(rows, width),
           sqnorm = BK_DEV_FN(sqnorm_scratch_bytes)(sqnorm_elements);
    size_t most = norm > sqnorm ? norm : sqnorm;
    /* the counters of the other kernels (cross-entropy, argument checks,
     * attention tile counts) take at most 24 bytes */
    return most > 32 ? most : 32;
}

#ifdef BK_EMULATOR

#include <stdio.h>

#include <mutex>

/* What the emulated device's runtime calls (cudaMalloc, cudaMallocAsync) have
 * handed out and not taken back is in the emulator's record of allocations
 * (emu/simt/simt_memory.h: exact sizes, red zones checked when freed and
 * at every synchronisation, the pointer checks of launches and copies). Two
 * environment variables make it visible:
 *   BK_EMU_DEVICE_BYTES=N  the device has N bytes: mem_info reports N minus
 *                          what is live as free, of N, and an allocation past
 *                          that fails as cudaMalloc's does (unset: the host's
 *                          memory, not reported);
 *   BK_EMU_TRACE_ALLOC=1   every runtime allocation is printed on stderr as
 *                          "emu: cudaMalloc N bytes", "emu: cudaMallocAsync
 *                          N bytes" or, for page-locked host memory
 *                          (device_streams.cu), "emu: cudaMallocHost N
 *                          bytes", so a test sees which calls allocate.
 * A launcher is given only pointers into live device allocations
 * (check_ptrs), as cudaPointerGetAttributes decides on a GPU: a host pointer
 * is refused. */
namespace
{
struct emu_memory {
    std::mutex lock;  /* a limit's check and the allocation it allows, together */
    size_t limit = 0; /* 0: none */
    int trace = 0;
};

emu_memory &memory()
{
    static emu_memory *m = [] {
        emu_memory *e = new emu_memory;
        const char *limit = getenv("BK_EMU_DEVICE_BYTES"), *trace = getenv("BK_EMU_TRACE_ALLOC");
        if (limit) e->limit = strtoull(limit, NULL, 10);
        e->trace = trace != NULL && trace[0] == '1';
        return e;
    }();
    return *m;
}

void trace(emu_memory &m, const char *call, size_t bytes)
{
    if (m.trace) fprintf(stderr, "emu: %s %zu bytes\n", call, bytes);
}

/* Device memory of bytes > 0 (call: the runtime call it stands for), or NULL. */
void *take(size_t bytes, const char *call)
{
    emu_memory &m = memory();
    std::lock_guard<std::mutex> hold(m.lock);
    trace(m, call, bytes);
    /* counted as the runtime counts it, in 256-byte granules */
    size_t rounded = (bytes + 255) / 256 * 256;
    if (m.limit && rounded > m.limit - bk_emu::memory_live_bytes(bk_emu::MEM_DEVICE)) return NULL;
    return bk_emu::memory_alloc(bytes, bk_emu::MEM_DEVICE, call);
}

/* A failed take: BK_ERR_DEVICE, as the runtime's cudaErrorMemoryAllocation. */
bk_status out_of_memory(const char *call, size_t bytes)
{
    char detail[128];
    size_t limit = memory().limit; /* fixed once read */
    if (limit)
        snprintf(detail, sizeof detail,
                 "out of memory (%zu bytes asked of a device of BK_EMU_DEVICE_BYTES=%zu)", bytes,
                 limit);
    else
        snprintf(detail, sizeof detail, "out of memory (%zu bytes asked of the host)", bytes);
    return bk_device_failed(call, detail);
}

/* Frees device memory p: 0; -1 with call's failure kept for bk_kernel_error
 * when its red zone was written (freed all the same) or p is no live device
 * allocation's start (nothing freed: cudaErrorInvalidValue). */
int give_back(void *p, const char *call)
{
    char why[400];
    if (bk_emu::memory_free(p, bk_emu::MEM_DEVICE, why, sizeof why) == 0) return 0;
    bk_device_failed(call, why);
    return -1;
}

/* Whether p points into a live device allocation (one past its end is not,
 * as cudaPointerGetAttributes says on an H200). */
int is_device_memory(const void *p)
{
    bk_emu::allocation a;
    return bk_emu::memory_find(p, &a) && a.kind == bk_emu::MEM_DEVICE;
}

/* Whether [p, p + bytes) lies in one live allocation of the kind; else why. */
int in_allocation(const void *p, size_t bytes, bk_emu::memory_kind kind, const char *side,
                  char *why, size_t len)
{
    bk_emu::allocation a;
    if (bk_emu::memory_find(p, &a) && a.kind == kind) {
        size_t offset = (size_t)(static_cast<const char *>(p) - a.base);
        if (bytes <= a.bytes - offset) return 1;
        snprintf(why, len,
                 "the %s %p, at offset %zu of %s (%s of %zu bytes at %p), has %zu bytes of it "
                 "left, not %zu",
                 side, p, offset, bk_emu::memory_kind_name(kind), a.call, a.bytes,
                 static_cast<const void *>(a.base), a.bytes - offset, bytes);
        return 0;
    }
    char what[240];
    bk_emu::memory_describe(p, what, sizeof what);
    snprintf(why, len, "the %s %p is %s, not %s", side, p, what, bk_emu::memory_kind_name(kind));
    return 0;
}

/* Whether p lies outside every device allocation (host memory of any kind). */
int is_host_side(const void *p, const char *side, char *why, size_t len)
{
    if (!is_device_memory(p)) return 1;
    char what[240];
    bk_emu::memory_describe(p, what, sizeof what);
    snprintf(why, len, "the %s %p is %s, not host memory", side, p, what);
    return 0;
}
} // namespace

/* BK_OK when dst and src agree with the copy's direction, else BK_ERR_DEVICE
 * with what each pointer is. The CUDA runtime's documentation of cudaMemcpy
 * calls pointers that do not match the direction undefined behaviour; the
 * emulator refuses them. Device sides must hold all the bytes in one live
 * device allocation; a host side may be page-locked or pageable (not tracked)
 * memory, but page-locked memory must hold the bytes too. */
bk_status bk_emu::check_copy(const char *call, void *dst, const void *src, size_t bytes, int dir)
{
    if (bytes == 0) return BK_OK;
    char why[400] = "";
    int dst_device = dir != BK_COPY_DEVICE_TO_HOST, src_device = dir != BK_COPY_HOST_TO_DEVICE;
    int ok =
        (dst_device ? in_allocation(dst, bytes, bk_emu::MEM_DEVICE, "destination", why, sizeof why)
                    : is_host_side(dst, "destination", why, sizeof why)) &&
        (src_device ? in_allocation(src, bytes, bk_emu::MEM_DEVICE, "source", why, sizeof why)
                    : is_host_side(src, "source", why, sizeof why));
    bk_emu::allocation a;
    const void *host = !dst_device ? static_cast<const void *>(dst) : !src_device ? src : NULL;
    if (ok && host && bk_emu::memory_find(host, &a) && a.kind == bk_emu::MEM_PINNED_HOST)
        ok = in_allocation(host, bytes, bk_emu::MEM_PINNED_HOST, "host side", why, sizeof why);
    if (ok) return BK_OK;
    static const char *const kinds[] = {"cudaMemcpyHostToDevice", "cudaMemcpyDeviceToHost",
                                        "cudaMemcpyDeviceToDevice"};
    char detail[480];
    snprintf(detail, sizeof detail, "%s of %zu bytes: %s",
             dir == BK_COPY_HOST_TO_DEVICE   ? kinds[0]
             : dir == BK_COPY_DEVICE_TO_HOST ? kinds[1]
                                             : kinds[2],
             bytes, why);
    return bk_device_failed(call, detail);
}

int bk_emu::red_zones_intact(const char *call)
{
    char why[400];
    if (bk_emu::memory_red_zones_intact(why, sizeof why) == 0) return 0;
    bk_device_failed(call, why);
    return -1;
}

void bk_emu::trace_alloc(const char *call, size_t bytes)
{
    emu_memory &m = memory();
    std::lock_guard<std::mutex> hold(m.lock);
    trace(m, call, bytes);
}

/* Nothing to report in a forked child, as cudaGetDeviceCount fails there. */
extern "C" int BK_DEV_FN(available)(void)
{
    return bk_emu_runtime("cudaGetDeviceCount") == BK_OK;
}

/* The node's emulated GPUs: BK_EMU_GPUS_PER_NODE (default 1), as the model
 * of NCCL (emu/nccl/) counts them. Each process has memory of
 * its own; the device index only tells the transport which ranks share a GPU. */
static int gpus_per_node(void)
{
    const char *s = getenv("BK_EMU_GPUS_PER_NODE");
    int n = s ? atoi(s) : 1;
    return n >= 1 && n <= 64 ? n : 1;
}

extern "C" bk_status BK_DEV_FN(use)(int index, int *count)
{
    *count = gpus_per_node();
    bk_status st = bk_emu_runtime("cudaSetDevice");
    if (st == BK_OK) bk_emu::memory_set_device(index % *count);
    return st;
}

extern "C" bk_status BK_DEV_FN(mem_info)(size_t *free_bytes, size_t *total_bytes)
{
    bk_status st = bk_emu_runtime("cudaMemGetInfo");
    if (st != BK_OK) return st;
    emu_memory &m = memory();
    std::lock_guard<std::mutex> hold(m.lock);
    if (!m.limit) return BK_ERR_UNSUPPORTED;
    *free_bytes = m.limit - bk_emu::memory_live_bytes(bk_emu::MEM_DEVICE);
    *total_bytes = m.limit;
    return BK_OK;
}

extern "C" bk_status BK_DEV_FN(malloc)(size_t bytes, void **p)
{
    if (p == NULL) return BK_ERR_ARG;
    *p = NULL;
    bk_status st = bk_emu_runtime("cudaMalloc");
    if (st != BK_OK || bytes == 0) return st;
    *p = take(bytes, "cudaMalloc");
    return *p ? BK_OK : out_of_memory("cudaMalloc", bytes);
}

/* As cudaFree, which waits for the device: no queued copy may touch p after.
 * After a queued kernel failed, p is still freed and the sticky error
 * returned, so that a failed run leaks nothing. */
extern "C" bk_status BK_DEV_FN(free)(void *p)
{
    if (p == NULL) return BK_OK;
    char why[300];
    if (!bk_emu::runtime_owned(why, sizeof why)) return bk_device_failed("cudaFree", why);
    bk_emu_note_wait(BK_EMU_WAIT_DEVICE);
    int ran = bk_emu::flush_all();
    if (give_back(p, "cudaFree") != 0) return BK_ERR_DEVICE;
    return bk_emu_ran(ran, "cudaFree");
}

/* Copies are queued on the stream (simt_stream.h); one to or from the host
 * then runs the queue, itself included, as the GPU's blocking copy waits.
 * The account counts what the GPU's path does: nothing for 0 bytes. */
extern "C" bk_status BK_DEV_FN(copy)(const bk_queue *q, void *dst, const void *src, size_t bytes,
                                     int dir)
{
    bk_status st = bk_emu_runtime("cudaMemcpyAsync");
    if (st == BK_OK) st = bk_emu::check_copy("cudaMemcpyAsync", dst, src, bytes, dir);
    if (st != BK_OK) return st;
    if (bytes > 0) bk_emu::account_copy(dir, bytes);
    if (bytes > 0 && dir != BK_COPY_DEVICE_TO_DEVICE) bk_emu_note_wait(BK_EMU_WAIT_COPY);
    st = bk_emu_ran(bk_emu::stream_enqueue_copy(q->stream, dst, src, bytes), "cudaMemcpyAsync");
    if (st == BK_OK && dir != BK_COPY_DEVICE_TO_DEVICE)
        st = bk_emu_ran(bk_emu::stream_flush(q->stream), "cudaMemcpyAsync");
    return st;
}

/* Queued as a kernel is (simt_stream.h), and counted as one: a GPU runs it
 * on the stream the same way. */
extern "C" bk_status BK_DEV_FN(zero_async)(const bk_queue *q, void *p, size_t bytes)
{
    bk_status st = bk_emu_runtime("cudaMemsetAsync");
    if (st != BK_OK || bytes == 0) return st;
    char why[400];
    if (!in_allocation(p, bytes, bk_emu::MEM_DEVICE, "destination", why, sizeof why))
        return bk_device_failed("cudaMemsetAsync", why);
    bk_emu::footprint fp = {0, (int64_t)bytes, 0, 1, 0};
    bk_emu::account_launch("cudaMemsetAsync", fp);
    const bk_emu::access acc[1] = {{p, 1, bytes}};
    auto zero = [p, bytes]() {
        memset(p, 0, bytes);
        return 0;
    };
    return bk_emu_ran(bk_emu::stream_launch(q->stream, "cudaMemsetAsync", acc, 1, zero),
                      "cudaMemsetAsync");
}

extern "C" bk_status BK_DEV_FN(sync)(const bk_queue *q)
{
    bk_status st = bk_emu_runtime("cudaStreamSynchronize");
    if (st != BK_OK) return st;
    bk_emu_note_wait(BK_EMU_WAIT_STREAM);
    st = bk_emu_ran(bk_emu::stream_flush(q->stream), "cudaStreamSynchronize");
    if (st != BK_OK) return st;
    return bk_emu::red_zones_intact("cudaStreamSynchronize") == 0 ? BK_OK : BK_ERR_DEVICE;
}

extern "C" bk_status BK_DEV_FN(scratch)(const bk_queue *q, size_t bytes, void **p)
{
    if (q->arena) return arena_scratch(q, bytes, p);
    bk_status st = bk_emu_runtime("cudaMallocAsync");
    if (st != BK_OK) return st;
    *p = bytes ? take(bytes, "cudaMallocAsync") : NULL;
    return *p || !bytes ? BK_OK : out_of_memory("cudaMallocAsync", bytes);
}

/* As cudaFreeAsync: after what q's stream holds. */
extern "C" void BK_DEV_FN(scratch_free)(const bk_queue *q, void *p)
{
    if (q->arena) {
        bk_arena_free(q->arena, p);
        return;
    }
    bk_emu::stream_flush(q->stream);
    if (p && give_back(p, "cudaFreeAsync") != 0) { /* no status to return it in */
        fprintf(stderr, "bk_emu: %s\n", bk_kernel_error());
        abort();
    }
}

/* As the GPU's: a pointer outside every live device allocation (host memory,
 * freed memory) is not served (BK_ERR_UNSUPPORTED). */
extern "C" bk_status BK_DEV_FN(check_ptrs)(const void *const *ptrs, int n)
{
    for (int i = 0; i < n; i++)
        if (ptrs[i] != NULL && !is_device_memory(ptrs[i])) return BK_ERR_UNSUPPORTED;
    return BK_OK;
}

#else /* CUDA */

static cudaStream_t stream_of(const bk_queue *q)
{
    return static_cast<cudaStream_t>(q->stream);
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
    bk_status st = BK_CUDA(cudaGetDeviceCount(count));
    if (st != BK_OK || *count < 1)
        return st != BK_OK ? st : bk_device_failed("cudaGetDeviceCount", "no CUDA device");
    return BK_CUDA(cudaSetDevice(index % *count));
}

extern "C" bk_status BK_DEV_FN(mem_info)(size_t *free_bytes, size_t *total_bytes)
{
    return BK_CUDA(cudaMemGetInfo(free_bytes, total_bytes));
}

extern "C" bk_status BK_DEV_FN(malloc)(size_t bytes, void **p)
{
    if (p == NULL) return BK_ERR_ARG;
    *p = NULL;
    if (bytes == 0) return BK_OK;
    return BK_CUDA(cudaMalloc(p, bytes));
}

extern "C" bk_status BK_DEV_FN(free)(void *p)
{
    return p ? BK_CUDA(cudaFree(p)) : BK_OK;
}

extern "C" bk_status BK_DEV_FN(copy)(const bk_queue *q, void *dst, const void *src, size_t bytes,
                                     int dir)
{
    if (bytes == 0) return BK_OK;
    cudaMemcpyKind kind = dir == BK_COPY_HOST_TO_DEVICE   ? cudaMemcpyHostToDevice
                          : dir == BK_COPY_DEVICE_TO_HOST ? cudaMemcpyDeviceToHost
                                                          : cudaMemcpyDeviceToDevice;
    bk_status st = BK_CUDA(cudaMemcpyAsync(dst, src, bytes, kind, stream_of(q)));
    if (st != BK_OK || dir == BK_COPY_DEVICE_TO_DEVICE) return st;
    return BK_CUDA(cudaStreamSynchronize(stream_of(q)));
}

extern "C" bk_status BK_DEV_FN(sync)(const bk_queue *q)
{
    return BK_CUDA(cudaStreamSynchronize(stream_of(q)));
}

extern "C" bk_status BK_DEV_FN(zero_async)(const bk_queue *q, void *p, size_t bytes)
{
    return bytes ? BK_CUDA(cudaMemsetAsync(p, 0, bytes, stream_of(q))) : BK_OK;
}

extern "C" bk_status BK_DEV_FN(scratch)(const bk_queue *q, size_t bytes, void **p)
{
    if (q->arena) return arena_scratch(q, bytes, p);
    *p = NULL;
    if (bytes == 0) return BK_OK;
    return BK_CUDA(cudaMallocAsync(p, bytes, stream_of(q)));
}

extern "C" void BK_DEV_FN(scratch_free)(const bk_queue *q, void *p)
{
    if (q->arena)
        bk_arena_free(q->arena, p);
    else if (p)
        (void)cudaFreeAsync(p, stream_of(q));
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
