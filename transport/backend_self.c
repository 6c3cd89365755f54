/* backend_self.c: a world of one. A send to oneself is copied at once into an
 * unexpected-message queue (so blocking code that sends before it receives
 * cannot deadlock); a receive takes the oldest queued message with its tag or
 * waits in the posted queue for one. */
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

static void deliver(bt_backend *b, bt_request *recv, const void *data, size_t bytes)
{
    recv->done = 1;
    if (bytes != recv->bytes) {
        recv->status = bt_fail(b->world, BT_ERR_ARG,
                               "message size mismatch on channel %d: expected %zu bytes, got %zu",
                               recv->channel, recv->bytes, bytes);
        return;
    }
    if (bytes) memcpy(recv->buf, data, bytes);
    recv->status = BT_OK;
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
        deliver(b, recv, buf, req->bytes);
        return BT_OK;
    }
    struct queued *q = malloc(sizeof *q);
    q->tag = req->tag;
    q->bytes = req->bytes;
    q->data = malloc(req->bytes ? req->bytes : 1);
    if (req->bytes) memcpy(q->data, buf, req->bytes);
    q->next = NULL;
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
        deliver(b, req, q->data, q->bytes);
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
    bt_backend *b = calloc(1, sizeof *b);
    b->ops = &self_ops;
    b->world = w;
    b->impl = calloc(1, sizeof(self_state));
    *out = b;
    return BT_OK;
}
