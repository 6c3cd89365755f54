/* device_streams.cu: the device backend's streams, events, queued copies and
 * page-locked host memory (kernels/device.h, "streams and events").
 *
 * Under nvcc these are the CUDA runtime's calls: streams are non-blocking (no
 * implicit ordering with the default stream), events have timing disabled
 * (cheaper to record and wait for). In the SIMT emulator they are the ordered
 * queues of emu/simt/simt_stream.h, where queued copies run as late as the
 * program allows, and page-locked memory is plain host memory (its
 * allocations traced as device_memory.cu's, BK_EMU_TRACE_ALLOC) that the
 * emulator remembers, so that a queued copy from or to pageable memory is
 * refused. */
#include <stdint.h>
#include <stdlib.h>

#include "kernels/cuda/dev_common.cuh"

#ifdef BK_EMULATOR

/* Pointers that disagree with the direction are refused (check_copy). A
 * queued copy whose host side is pageable memory is refused: on a GPU the
 * runtime copies it synchronously (through a staging buffer of its own), so it
 * overlaps nothing, which is never what code that queues a copy wants. */
extern "C" bk_status BK_DEV_FN(copy_async)(const bk_queue *q, void *dst, const void *src,
                                           size_t bytes, int dir)
{
    bk_status st = bk_emu_runtime("cudaMemcpyAsync");
    if (st == BK_OK) st = bk_emu::check_copy("cudaMemcpyAsync", dst, src, bytes, dir);
    if (st != BK_OK) return st;
    const void *host = dir == BK_COPY_HOST_TO_DEVICE   ? src
                       : dir == BK_COPY_DEVICE_TO_HOST ? (const void *)dst
                                                       : NULL;
    bk_emu::allocation held;
    if (host && bytes > 0 &&
        !(bk_emu::memory_find(host, &held) && held.kind == bk_emu::MEM_PINNED_HOST))
        return bk_device_failed("cudaMemcpyAsync", "the host buffer is pageable memory (not from "
                                                   "bk_host_pinned_malloc): the copy would run "
                                                   "synchronously");
    if (bytes > 0) bk_emu::account_copy(dir, bytes);
    return bk_emu_ran(bk_emu::stream_enqueue_copy(q->stream, dst, src, bytes), "cudaMemcpyAsync");
}

extern "C" bk_status BK_DEV_FN(stream_create)(void **stream)
{
    bk_status st = bk_emu_runtime("cudaStreamCreate");
    if (st != BK_OK) return st;
    *stream = bk_emu::stream_create();
    return *stream ? BK_OK : bk_device_failed("cudaStreamCreate", "out of host memory");
}

extern "C" bk_status BK_DEV_FN(stream_destroy)(void *stream)
{
    bk_emu::stream_destroy(stream);
    return BK_OK;
}

extern "C" bk_status BK_DEV_FN(event_create)(void **event)
{
    bk_status st = bk_emu_runtime("cudaEventCreate");
    if (st != BK_OK) return st;
    *event = bk_emu::event_create();
    return *event ? BK_OK : bk_device_failed("cudaEventCreate", "out of host memory");
}

extern "C" bk_status BK_DEV_FN(event_destroy)(void *event)
{
    bk_emu::event_destroy(event);
    return BK_OK;
}

extern "C" bk_status BK_DEV_FN(event_record)(void *event, const bk_queue *q)
{
    bk_emu::event_record(event, q->stream);
    return BK_OK;
}

/* What q runs next may need what the event covers: eagerly, that work runs
 * now (q's next launch would run at once); deferred, when q gets there. */
extern "C" bk_status BK_DEV_FN(stream_wait_event)(const bk_queue *q, void *event)
{
    return bk_emu_ran(bk_emu::stream_wait_event(q->stream, event), "cudaStreamWaitEvent");
}

extern "C" bk_status BK_DEV_FN(event_sync)(void *event)
{
    bk_emu_note_wait(BK_EMU_WAIT_EVENT);
    bk_status st = bk_emu_ran(bk_emu::event_flush(event), "cudaEventSynchronize");
    if (st != BK_OK) return st;
    return bk_emu::red_zones_intact("cudaEventSynchronize") == 0 ? BK_OK : BK_ERR_DEVICE;
}

extern "C" int BK_DEV_FN(event_query)(void *event)
{
    bk_emu_note_wait(BK_EMU_WAIT_QUERY);
    int done = bk_emu::event_query(event);
    return done >= 0 ? done : -(int)bk_emu_ran(-1, "cudaEventQuery");
}

extern "C" bk_status BK_DEV_FN(host_malloc)(size_t bytes, void **p)
{
    *p = NULL;
    bk_status st = bk_emu_runtime("cudaMallocHost");
    if (st != BK_OK) return st;
    if (bytes) bk_emu::trace_alloc("cudaMallocHost", bytes);
    *p = bk_emu::memory_alloc(bytes, bk_emu::MEM_PINNED_HOST, "cudaMallocHost");
    return *p || bytes == 0 ? BK_OK : BK_ERR_NOMEM;
}

/* As cudaFreeHost, which waits for the device's copies from or to p. */
extern "C" bk_status BK_DEV_FN(host_free)(void *p)
{
    if (p == NULL) return BK_OK;
    bk_emu_note_wait(BK_EMU_WAIT_DEVICE);
    int ran = bk_emu::flush_all();
    char why[400];
    if (bk_emu::memory_free(p, bk_emu::MEM_PINNED_HOST, why, sizeof why) != 0)
        return bk_device_failed("cudaFreeHost", why);
    return bk_emu_ran(ran, "cudaFreeHost");
}

extern "C" void BK_DEV_FN(note_piece)(const void *p, size_t bytes)
{
    bk_emu::note_piece(p, bytes);
}

extern "C" void BK_DEV_FN(note_parts)(const void *p, size_t part_bytes, int parts)
{
    bk_emu::note_parts(p, part_bytes, parts);
}

/* The steps' account (emu/simt/simt_account.h). */
extern "C" void BK_DEV_FN(step_begin)(int64_t step)
{
    bk_emu_account_reset(step);
}

extern "C" void BK_DEV_FN(step_end)(void)
{
    bk_emu_account_close();
}

#else /* CUDA */

/* BK_CUDA's status (bk_cuda.cuh), but BK_ERR_NOMEM when the runtime ran out
 * of memory */
static bk_status status_of(cudaError_t e, const char *call)
{
    bk_status st = bk_cuda_status(e, call);
    return e == cudaErrorMemoryAllocation ? BK_ERR_NOMEM : st;
}
#define STATUS_OF(call) status_of((call), #call)

extern "C" bk_status BK_DEV_FN(copy_async)(const bk_queue *q, void *dst, const void *src,
                                           size_t bytes, int dir)
{
    if (bytes == 0) return BK_OK;
    cudaMemcpyKind kind = dir == BK_COPY_HOST_TO_DEVICE   ? cudaMemcpyHostToDevice
                          : dir == BK_COPY_DEVICE_TO_HOST ? cudaMemcpyDeviceToHost
                                                          : cudaMemcpyDeviceToDevice;
    return STATUS_OF(cudaMemcpyAsync(dst, src, bytes, kind, static_cast<cudaStream_t>(q->stream)));
}

extern "C" bk_status BK_DEV_FN(stream_create)(void **stream)
{
    cudaStream_t s = NULL;
    bk_status st = STATUS_OF(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    *stream = s;
    return st;
}

extern "C" bk_status BK_DEV_FN(stream_destroy)(void *stream)
{
    return stream ? STATUS_OF(cudaStreamDestroy(static_cast<cudaStream_t>(stream))) : BK_OK;
}

extern "C" bk_status BK_DEV_FN(event_create)(void **event)
{
    cudaEvent_t e = NULL;
    bk_status st = STATUS_OF(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    *event = e;
    return st;
}

extern "C" bk_status BK_DEV_FN(event_destroy)(void *event)
{
    return event ? STATUS_OF(cudaEventDestroy(static_cast<cudaEvent_t>(event))) : BK_OK;
}

extern "C" bk_status BK_DEV_FN(event_record)(void *event, const bk_queue *q)
{
    return STATUS_OF(
        cudaEventRecord(static_cast<cudaEvent_t>(event), static_cast<cudaStream_t>(q->stream)));
}

extern "C" bk_status BK_DEV_FN(stream_wait_event)(const bk_queue *q, void *event)
{
    return STATUS_OF(cudaStreamWaitEvent(static_cast<cudaStream_t>(q->stream),
                                         static_cast<cudaEvent_t>(event), 0));
}

extern "C" bk_status BK_DEV_FN(event_sync)(void *event)
{
    return STATUS_OF(cudaEventSynchronize(static_cast<cudaEvent_t>(event)));
}

extern "C" int BK_DEV_FN(event_query)(void *event)
{
    cudaError_t e = cudaEventQuery(static_cast<cudaEvent_t>(event));
    if (e == cudaErrorNotReady) return 0;
    return e == cudaSuccess ? 1 : -(int)status_of(e, "cudaEventQuery");
}

extern "C" bk_status BK_DEV_FN(host_malloc)(size_t bytes, void **p)
{
    *p = NULL;
    return bytes ? STATUS_OF(cudaMallocHost(p, bytes)) : BK_OK;
}

extern "C" bk_status BK_DEV_FN(host_free)(void *p)
{
    return p ? STATUS_OF(cudaFreeHost(p)) : BK_OK;
}

/* A GPU orders its streams itself: nothing to note. */
extern "C" void BK_DEV_FN(note_piece)(const void *p, size_t bytes)
{
    (void)p, (void)bytes;
}

extern "C" void BK_DEV_FN(note_parts)(const void *p, size_t part_bytes, int parts)
{
    (void)p, (void)part_bytes, (void)parts;
}

/* A GPU keeps no account of the steps (its profiler is the place). */
extern "C" void BK_DEV_FN(step_begin)(int64_t step)
{
    (void)step;
}

extern "C" void BK_DEV_FN(step_end)(void) {}

#endif
