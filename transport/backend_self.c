/* backend_self.c: a rank's messages to itself (all of them in a world of
 * one). A send to oneself is copied at once, into the matching posted receive
 * or else into an unexpected-message queue in host memory (so blocking code
 * that sends before it receives cannot deadlock); a receive takes the oldest
 * queued message with its tag or waits in the posted queue for one. Device
 * buffers are copied with the world's device hooks (device to device straight
 * into a posted receive) and waited for, so both requests are complete at
 * once, as with host memory. */
#include <stdlib.h>
#include <string.h>

#include "transport/internal.h"

typedef struct {
    bt_request *posted_head, *posted_tail; /* receives waiting for a send */
    struct queued {
        uint64_t tag;
        size_t bytes;
        unsigned char *data;
        struct queued *next;
    } *unexpected_head, *unexpected_tail;
} self_state;

/* dst = src across memory kinds: memcpy between host buffers, else a device
 * copy in the direction the kinds give (host to device, device to host, device
 * to device: the hooks' dir numbers). */
static bt_status copy_between(bt_backend *b, void *dst, bt_mem dst_mem, const void *src,
                              bt_mem src_mem, size_t bytes)
{
    if (bytes == 0) return BT_OK;
    if (dst_mem == BT_MEM_HOST && src_mem == BT_MEM_HOST) {
        memcpy(dst, src, bytes);
        return BT_OK;
    }
    int dir = src_mem == BT_MEM_HOST ? 0 : dst_mem == BT_MEM_HOST ? 1 : 2;
    return bt_device_copy_wait(b->world, dst, src, bytes, dir);
}

static void deliver(bt_backend *b, bt_request *recv, const void *data, bt_mem data_mem,
                    size_t bytes)
{
    recv->done = 1;
    if (bytes != recv->bytes) {
        recv->status = bt_fail(b->world, BT_ERR_ARG,
                               "message size mismatch on channel %d: expected %zu bytes, got %zu",
                               recv->channel, recv->bytes, bytes);
        return;
    }
    recv->status = copy_between(b, recv->buf, recv->mem, data, data_mem, bytes);
}

static bt_status self_isend(bt_backend *b, bt_request *req, const void *buf)
{
    self_state *s = b->impl;
    req->done = 1;
    req->status = BT_OK;
    for (bt_request **p = &s->posted_head, *prev = NULL; *p; prev = *p, p = &(*p)->next) {
        if ((*p)->tag != req->tag) continue;
        bt_request *recv = *p;
        *p = recv->next;
        if (s->posted_tail == recv) s->posted_tail = prev;
        deliver(b, recv, buf, req->mem, req->bytes);
        return recv->status;
    }
    struct queued *q = bt_calloc(b->world, sizeof *q, "a message a rank sends itself");
    if (q) q->data = bt_calloc(b->world, req->bytes, "a message a rank sends itself");
    if (!q || !q->data) {
        free(q);
        return BT_ERR_SYS;
    }
    q->tag = req->tag;
    q->bytes = req->bytes;
    q->next = NULL;
    bt_status st = copy_between(b, q->data, BT_MEM_HOST, buf, req->mem, req->bytes);
    if (st != BT_OK) {
        free(q->data);
        free(q);
        return st;
    }
    if (s->unexpected_tail)
        s->unexpected_tail->next = q;
    else
        s->unexpected_head = q;
    s->unexpected_tail = q;
    return BT_OK;
}

static bt_status self_irecv(bt_backend *b, bt_request *req)
{
    self_state *s = b->impl;
    struct queued *prev = NULL;
    for (struct queued *q = s->unexpected_head; q; prev = q, q = q->next) {
        if (q->tag != req->tag) continue;
        if (prev)
            prev->next = q->next;
        else
            s->unexpected_head = q->next;
        if (s->unexpected_tail == q) s->unexpected_tail = prev;
        deliver(b, req, q->data, BT_MEM_HOST, q->bytes);
        free(q->data);
        free(q);
        return BT_OK;
    }
    req->next = NULL;
    if (s->posted_tail)
        s->posted_tail->next = req;
    else
        s->posted_head = req;
    s->posted_tail = req;
    return BT_OK;
}

static void self_test(bt_backend *b, bt_request *req) { (void)b, (void)req; }

static void self_cancel(bt_backend *b, bt_request *req)
{
    self_state *s = b->impl;
    for (bt_request **p = &s->posted_head, *prev = NULL; *p; prev = *p, p = &(*p)->next)
        if (*p == req) {
            *p = req->next;
            if (s->posted_tail == req) s->posted_tail = prev;
            return;
        }
}

static void self_progress(bt_backend *b) { (void)b; }
static bt_status self_flush(bt_backend *b) { return (void)b, BT_OK; }

static void self_finalize(bt_backend *b)
{
    self_state *s = b->impl;
    while (s->unexpected_head) {
        struct queued *q = s->unexpected_head;
        s->unexpected_head = q->next;
        free(q->data);
        free(q);
    }
    free(s);
    free(b);
}

static const bt_backend_ops self_ops = {
    .name = "self",
    .mem_kinds = BT_MEM_BIT(BT_MEM_HOST) | BT_MEM_BIT(BT_MEM_DEVICE),
    .isend = self_isend,
    .irecv = self_irecv,
    .test = self_test,
    .cancel = self_cancel,
    .progress = self_progress,
    .flush = self_flush,
    .finalize = self_finalize,
};

bt_status bt_backend_self_create(bt_world *w, bt_backend **out)
{
    bt_backend *b = bt_calloc(w, sizeof *b, "the self backend");
    self_state *s = b ? bt_calloc(w, sizeof *s, "the self backend's queues") : NULL;
    *out = NULL;
    if (!s) {
        free(b);
        return BT_ERR_SYS;
    }
    b->ops = &self_ops;
    b->world = w;
    b->impl = s;
    *out = b;
    return BT_OK;
}
