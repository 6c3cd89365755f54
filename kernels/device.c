/* device.c: device memory, streams and events for callers of the kernels
 * (kernels/device.h), forwarded to the program's device backend; without one,
 * nothing is available and every call answers BK_ERR_UNSUPPORTED. Each call
 * that reaches the backend is noted first (bk_device_note_call, here for
 * every entry point of kernels/), so that the emulator's account says which
 * entry point, called from where, made the host wait. */
#include "kernels/device_ops.h"

/* The backend's function `op` called with `args`, or BK_ERR_UNSUPPORTED. */
#define BK_FORWARD(op, args)                                                                       \
    do {                                                                                           \
        const bk_device_ops *d_ = bk_device_backend();                                             \
        BK_DEVICE_NOTE_CALL();                                                                     \
        return d_ != NULL ? d_->op args : BK_ERR_UNSUPPORTED;                                      \
    } while (0)

static _Thread_local bk_device_call t_last_call;

void bk_device_note_call(const char *entry, const void *caller)
{
    t_last_call.entry = entry;
    t_last_call.caller = caller;
}

bk_device_call bk_device_last_call(void)
{
    return t_last_call;
}

int bk_device_available(void)
{
    const bk_device_ops *d = bk_device_backend();
    return d != NULL && d->available();
}

const char *bk_device_backend_name(void)
{
    const bk_device_ops *d = bk_device_backend();
    return d ? d->name : "none";
}

bk_status bk_device_use(int index, int *count)
{
    BK_CHECK_ARG(index >= 0 && count != NULL);
    BK_FORWARD(use, (index, count));
}

bk_status bk_device_prepare(void)
{
    BK_FORWARD(prepare, ());
}

bk_status bk_device_memory(size_t *free_bytes, size_t *total_bytes)
{
    BK_CHECK_ARG(free_bytes != NULL && total_bytes != NULL);
    BK_FORWARD(mem_info, (free_bytes, total_bytes));
}

size_t bk_device_scratch_bytes(int64_t rows, int64_t width, int64_t sqnorm_elements)
{
    const bk_device_ops *d = bk_device_backend();
    if (d == NULL || rows < 0 || width < 0 || sqnorm_elements < 0) return 0;
    return d->scratch_bytes(rows, width, sqnorm_elements);
}

bk_status bk_device_malloc(size_t bytes, void **p)
{
    BK_CHECK_ARG(p != NULL);
    BK_FORWARD(malloc_, (bytes, p));
}

bk_status bk_device_free(void *p)
{
    BK_FORWARD(free_, (p));
}

bk_status bk_device_upload(const bk_queue *q, void *dst, const void *src, size_t bytes)
{
    BK_CHECK_ARG(q != NULL && (bytes == 0 || (dst != NULL && src != NULL)));
    BK_FORWARD(copy, (q, dst, src, bytes, BK_COPY_HOST_TO_DEVICE));
}

bk_status bk_device_download(const bk_queue *q, void *dst, const void *src, size_t bytes)
{
    BK_CHECK_ARG(q != NULL && (bytes == 0 || (dst != NULL && src != NULL)));
    BK_FORWARD(copy, (q, dst, src, bytes, BK_COPY_DEVICE_TO_HOST));
}

bk_status bk_device_copy(const bk_queue *q, void *dst, const void *src, size_t bytes)
{
    BK_CHECK_ARG(q != NULL && (bytes == 0 || (dst != NULL && src != NULL)));
    BK_FORWARD(copy, (q, dst, src, bytes, BK_COPY_DEVICE_TO_DEVICE));
}

bk_status bk_device_sync(const bk_queue *q)
{
    BK_CHECK_ARG(q != NULL);
    BK_FORWARD(sync, (q));
}

bk_status bk_device_stream_create(void **stream)
{
    BK_CHECK_ARG(stream != NULL);
    *stream = NULL;
    BK_FORWARD(stream_create, (stream));
}

bk_status bk_device_stream_destroy(void *stream)
{
    BK_FORWARD(stream_destroy, (stream));
}

bk_status bk_device_event_create(void **event)
{
    BK_CHECK_ARG(event != NULL);
    *event = NULL;
    BK_FORWARD(event_create, (event));
}

bk_status bk_device_event_destroy(void *event)
{
    BK_FORWARD(event_destroy, (event));
}

bk_status bk_device_event_record(void *event, const bk_queue *q)
{
    BK_CHECK_ARG(event != NULL && q != NULL && q->where == BK_DEVICE);
    BK_FORWARD(event_record, (event, q));
}

bk_status bk_device_stream_wait_event(const bk_queue *q, void *event)
{
    BK_CHECK_ARG(event != NULL && q != NULL && q->where == BK_DEVICE);
    BK_FORWARD(stream_wait_event, (q, event));
}

bk_status bk_device_event_sync(void *event)
{
    BK_CHECK_ARG(event != NULL);
    BK_FORWARD(event_sync, (event));
}

int bk_device_event_query(void *event)
{
    if (event == NULL) return -(int)BK_ERR_ARG;
    const bk_device_ops *d = bk_device_backend();
    BK_DEVICE_NOTE_CALL();
    return d != NULL ? d->event_query(event) : -(int)BK_ERR_UNSUPPORTED;
}

bk_status bk_device_upload_async(const bk_queue *q, void *dst, const void *src, size_t bytes)
{
    BK_CHECK_ARG(q != NULL && (bytes == 0 || (dst != NULL && src != NULL)));
    BK_FORWARD(copy_async, (q, dst, src, bytes, BK_COPY_HOST_TO_DEVICE));
}

bk_status bk_device_download_async(const bk_queue *q, void *dst, const void *src, size_t bytes)
{
    BK_CHECK_ARG(q != NULL && (bytes == 0 || (dst != NULL && src != NULL)));
    BK_FORWARD(copy_async, (q, dst, src, bytes, BK_COPY_DEVICE_TO_HOST));
}

bk_status bk_host_pinned_malloc(size_t bytes, void **p)
{
    BK_CHECK_ARG(p != NULL);
    *p = NULL;
    BK_FORWARD(host_malloc, (bytes, p));
}

bk_status bk_host_pinned_free(void *p)
{
    BK_FORWARD(host_free, (p));
}

void bk_device_note_piece(const void *p, size_t bytes)
{
    const bk_device_ops *d = bk_device_backend();
    if (d != NULL) d->note_piece(p, bytes);
}

void bk_device_note_parts(const void *p, size_t part_bytes, int parts)
{
    const bk_device_ops *d = bk_device_backend();
    if (d != NULL) d->note_parts(p, part_bytes, parts);
}

void bk_device_step_begin(int64_t step)
{
    const bk_device_ops *d = bk_device_backend();
    if (d != NULL) d->step_begin(step);
}

void bk_device_step_end(void)
{
    const bk_device_ops *d = bk_device_backend();
    if (d != NULL) d->step_end();
}
