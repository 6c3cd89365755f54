/* device_link.c: see device_link.h. Each hook adapts one call of
 * kernels/device.h: the transport speaks of streams, the kernels of queues. */
#include "src/attn/device_link.h"

#include "kernels/device.h"
#include "src/attn/ring_run.h"

static int ok(bk_status st)
{
    return st == BK_OK ? 0 : -1;
}

static bk_queue on(void *stream)
{
    bk_queue q = {BK_DEVICE, stream, 0, NULL};
    return q;
}

static int host_alloc(size_t bytes, void **p)
{
    return ok(bk_host_pinned_malloc(bytes, p));
}

static int host_free(void *p)
{
    return ok(bk_host_pinned_free(p));
}

static int stream_create(void **s)
{
    return ok(bk_device_stream_create(s));
}

static int stream_destroy(void *s)
{
    return ok(bk_device_stream_destroy(s));
}

static int event_create(void **e)
{
    return ok(bk_device_event_create(e));
}

static int event_destroy(void *e)
{
    return ok(bk_device_event_destroy(e));
}

static int event_record(void *e, void *stream)
{
    bk_queue q = on(stream);
    return ok(bk_device_event_record(e, &q));
}

static int event_query(void *e)
{
    return bk_device_event_query(e);
}

/* dir: 0 host to device, 1 device to host, 2 device to device */
static int copy_async(void *stream, void *dst, const void *src, size_t bytes, int dir)
{
    bk_queue q = on(stream);
    return ok(dir == 0   ? bk_device_upload_async(&q, dst, src, bytes)
              : dir == 1 ? bk_device_download_async(&q, dst, src, bytes)
                         : bk_device_copy(&q, dst, src, bytes));
}

/* as copy_async, returning once the copy is done */
static int copy(void *stream, void *dst, const void *src, size_t bytes, int dir)
{
    bk_queue q = on(stream);
    bk_status st = dir == 0   ? bk_device_upload(&q, dst, src, bytes)
                   : dir == 1 ? bk_device_download(&q, dst, src, bytes)
                              : bk_device_copy(&q, dst, src, bytes);
    if (st == BK_OK && dir == 2) st = bk_device_sync(&q);
    return ok(st);
}

bt_device_hooks transport_device_hooks(int device_id)
{
    bt_device_hooks h = {
        .name = bk_device_backend_name(),
        .device_id = device_id,
        .host_alloc = host_alloc,
        .host_free = host_free,
        .stream_create = stream_create,
        .stream_destroy = stream_destroy,
        .event_create = event_create,
        .event_destroy = event_destroy,
        .event_record = event_record,
        .event_query = event_query,
        .copy_async = copy_async,
        .copy = copy,
        .last_error = bk_kernel_error,
    };
    return h;
}

bt_status transport_link_device(bt_world *w, int device_id)
{
    bt_device_hooks h = transport_device_hooks(device_id);
    bt_status st = bt_world_set_device(w, &h);
    /* the ring is what sends device buffers: its staging pool now, not in a step */
    return st == BT_OK ? bt_staging_reserve(w, RING_MAX_IN_FLIGHT) : st;
}
