/* staging.c: device buffers to a peer whose UCX cannot read device memory,
 * through page-locked host buffers, as a chunked pipeline.
 *
 * A message of n bytes travels as ceil(n / chunk_bytes) chunks (one empty
 * chunk for n = 0), each a host message of the peer's host backend on the
 * message's tag with BT_STAGED_CHANNEL_BIT added to the channel, in order.
 *   sender:   device-to-host copy of chunk i into a free slot on the staging
 *             stream, an event after it; when the event is done, the slot is
 *             sent; when the send is done, the slot is free again.
 *   receiver: a free slot receives chunk i; when it arrived, a host-to-device
 *             copy into place on the receive stream and an event; when the
 *             event is done, the slot is free again.
 * With several slots per message in flight, the copy of chunk i+1 overlaps
 * the wire of chunk i and the peer's copy of chunk i-1. A request completes
 * when its last chunk is sent (sender) or copied to the device (receiver).
 *
 * Nothing runs on its own: bt_test, bt_wait and bt_progress drive every
 * message (staging_progress). Chunks of two messages with the same tag and
 * peer must not interleave on the wire, so a message posts its chunks only
 * after every earlier message of that tag and peer has posted all of its own.
 * Slots (a pinned buffer and its event) come from a pool freed at finalize:
 * page-locked allocations are slow (they map memory for the device and may
 * synchronise it) and must not happen per message, nor inside a training
 * step. bt_staging_reserve takes the pool a caller's messages in flight need
 * when it sets up; a message that still finds none free takes one more, and
 * the pool keeps it (bt_staging_stats_of counts both). The staged device
 * collectives (collectives_mem.c) borrow buffers and the two streams of the
 * pool too (bt_staging_lend). */
#include <stdlib.h>
#include <string.h>

#include "transport/internal.h"
#include "util/parse.h"

/* 1 MiB chunks: a copy of that size runs near full PCIe speed (about 40 us at
 * 25 GB/s, against a few us to start a copy or a UCX rendezvous), and a large
 * message (the ring's K/V blocks are tens of MiB) still splits into enough
 * chunks for the three stages to overlap; the pipeline's fill costs two
 * chunks. 4 slots per message keep a copy, a chunk on the wire and one
 * waiting ready on each side. BURST_STAGE_CHUNK (bytes; K, M suffixes) and
 * BURST_STAGE_SLOTS override them; the chunk size must be equal on every rank
 * (bt_world_set_device checks). */
enum { STAGE_CHUNK_BYTES_DEFAULT = 1 << 20, STAGE_SLOTS_DEFAULT = 4, STAGE_SLOTS_MAX = 16 };
/* The most messages bt_staging_reserve takes buffers for (far beyond any use). */
enum { STAGE_MESSAGES_MAX = 1 << 16 };

/* Hook directions. */
enum { DIR_H2D = 0, DIR_D2H = 1 };

enum { SLOT_FREE, SLOT_COPY, SLOT_WIRE };

typedef struct {
    int state;
    size_t chunk;      /* which chunk it holds */
    bt_stage_buf *buf;
    bt_request wire;   /* the chunk's host message */
} stage_slot;

/* One staged message: the user's request, its chunks and slots. */
typedef struct stage_msg {
    bt_request *req;
    size_t n_chunks;
    size_t next_copy;  /* send: next chunk to copy out of the device */
    size_t next_wire;  /* next chunk to post on the wire */
    size_t n_done;     /* chunks finished */
    stage_slot slots[STAGE_SLOTS_MAX];
    struct stage_msg *prev, *next; /* active messages, in posting order */
} stage_msg;

typedef struct {
    size_t chunk_bytes;
    int n_slots;
    void *d2h_stream, *h2d_stream; /* one per direction: both copy engines work */
    bt_stage_buf *pool;            /* free slots' buffers */
    int n_bufs;
    bt_stage_buf **owned;    /* [n_bufs]: every buffer, freed at finalize */
    int reserved, grown;     /* of n_bufs: by bt_staging_reserve, later by a user */
    int in_use, peak_in_use; /* buffers out of the pool now, and at most */
    stage_msg *head, *tail;
} staging_state;

/* ------------------------------------------------------------------ settings */

size_t bt_staging_chunk_bytes(void)
{
    const char *env = getenv("BURST_STAGE_CHUNK");
    uint64_t bytes;
    if (!env) return STAGE_CHUNK_BYTES_DEFAULT;
    return bu_parse_bytes(env, &bytes) == 0 && bytes <= SIZE_MAX ? (size_t)bytes : 0;
}

static int slots_setting(void)
{
    const char *env = getenv("BURST_STAGE_SLOTS");
    int n = env ? atoi(env) : STAGE_SLOTS_DEFAULT;
    return n < 1 ? 1 : n > STAGE_SLOTS_MAX ? STAGE_SLOTS_MAX : n;
}

/* ------------------------------------------------------------------ slots */

/* A new buffer (page-locked memory and its event), owned by the pool but
 * not in its free list; NULL with *st after a failure. */
static bt_stage_buf *buf_new(bt_backend *b, bt_status *st)
{
    staging_state *s = b->impl;
    bt_stage_buf **grown = realloc(s->owned, (size_t)(s->n_bufs + 1) * sizeof *grown);
    bt_stage_buf *sb = calloc(1, sizeof *sb);
    if (grown) s->owned = grown;
    if (!grown || !sb || b->world->hooks.host_alloc(s->chunk_bytes, &sb->host) != 0 ||
        b->world->hooks.event_create(&sb->event) != 0) {
        if (sb && sb->host) b->world->hooks.host_free(sb->host);
        free(sb);
        *st = bt_device_fail(b->world, "allocating a page-locked chunk buffer");
        return NULL;
    }
    s->owned[s->n_bufs++] = sb;
    return sb;
}

static void buf_put(staging_state *s, bt_stage_buf *sb)
{
    sb->next = s->pool;
    s->pool = sb;
}

/* A free buffer for a user: from the pool, or a new one when none is free
 * (which the pool then keeps: counted as grown); buf_release gives it back. */
static bt_stage_buf *buf_get(bt_backend *b, bt_status *st)
{
    staging_state *s = b->impl;
    bt_stage_buf *sb = s->pool;
    if (sb)
        s->pool = sb->next;
    else if ((sb = buf_new(b, st)) != NULL)
        s->grown++;
    if (sb && ++s->in_use > s->peak_in_use) s->peak_in_use = s->in_use;
    return sb;
}

static void buf_release(staging_state *s, bt_stage_buf *sb)
{
    buf_put(s, sb);
    s->in_use--;
}

static size_t chunk_len(const staging_state *s, const bt_request *req, size_t chunk)
{
    size_t off = chunk * s->chunk_bytes;
    return req->bytes - off < s->chunk_bytes ? req->bytes - off : s->chunk_bytes;
}

/* The device address of chunk's bytes (never arithmetic on a NULL buffer). */
static unsigned char *chunk_dev(const staging_state *s, const bt_request *req, size_t chunk)
{
    return req->bytes ? (unsigned char *)req->buf + chunk * s->chunk_bytes : NULL;
}

static int slot_free_index(const stage_msg *m, int n_slots)
{
    for (int i = 0; i < n_slots; i++)
        if (m->slots[i].state == SLOT_FREE) return i;
    return -1;
}

static stage_slot *slot_holding(stage_msg *m, int n_slots, size_t chunk, int state)
{
    for (int i = 0; i < n_slots; i++)
        if (m->slots[i].state == state && m->slots[i].chunk == chunk) return &m->slots[i];
    return NULL;
}

/* ------------------------------------------------------------------ the wire */

/* May m post chunks on the wire? Not while an earlier message of the same
 * direction, tag and peer still has chunks to post. */
static int wire_turn(const stage_msg *m)
{
    for (const stage_msg *o = m->prev; o; o = o->prev)
        if (o->req->kind == m->req->kind && o->req->tag == m->req->tag &&
            o->req->world_peer == m->req->world_peer && o->next_wire < o->n_chunks)
            return 0;
    return 1;
}

static bt_status wire_post(bt_backend *b, stage_msg *m, stage_slot *slot)
{
    staging_state *s = b->impl;
    bt_request *req = m->req, *w = &slot->wire;
    memset(w, 0, sizeof *w);
    w->world = b->world;
    w->backend = bt_backend_for(b->world, req->world_peer);
    w->kind = req->kind;
    w->mem = BT_MEM_HOST;
    w->world_peer = req->world_peer;
    w->channel = req->channel;
    w->bytes = chunk_len(s, req, slot->chunk);
    w->buf = slot->buf->host;
    w->tag = req->tag | ((uint64_t)BT_STAGED_CHANNEL_BIT << 32);
    slot->state = SLOT_WIRE;
    m->next_wire++;
    return req->kind == BT_REQ_SEND ? w->backend->ops->isend(w->backend, w, w->buf)
                                    : w->backend->ops->irecv(w->backend, w);
}

/* Tests slot's wire message: 1 done, 0 not yet; *st its failure. */
static int wire_done(stage_slot *slot, bt_status *st)
{
    bt_request *w = &slot->wire;
    if (!w->done) w->backend->ops->test(w->backend, w);
    if (!w->done) return 0;
    if (w->status != BT_OK) *st = w->status;
    return 1;
}

static bt_status copy_chunk(bt_backend *b, stage_msg *m, stage_slot *slot)
{
    staging_state *s = b->impl;
    const bt_device_hooks *h = &b->world->hooks;
    size_t len = chunk_len(s, m->req, slot->chunk);
    int sending = m->req->kind == BT_REQ_SEND;
    void *stream = sending ? s->d2h_stream : s->h2d_stream;
    unsigned char *dev = chunk_dev(s, m->req, slot->chunk);
    int rc = len == 0 ? 0
             : sending ? h->copy_async(stream, slot->buf->host, dev, len, DIR_D2H)
                       : h->copy_async(stream, dev, slot->buf->host, len, DIR_H2D);
    if (rc == 0) rc = h->event_record(slot->buf->event, stream);
    slot->state = SLOT_COPY;
    return rc == 0 ? BT_OK
                   : bt_device_fail(b->world,
                                    sending ? "a device-to-host copy" : "a host-to-device copy");
}

/* 1 when slot's copy is done. */
static int copy_done(bt_backend *b, stage_slot *slot, bt_status *st)
{
    int q = b->world->hooks.event_query(slot->buf->event);
    if (q < 0) *st = bt_device_fail(b->world, "an event query");
    return q != 0;
}

static void slot_release(staging_state *s, stage_slot *slot)
{
    buf_release(s, slot->buf);
    slot->buf = NULL;
    slot->state = SLOT_FREE;
}

/* ------------------------------------------------------------------ the pipelines */

/* Sender: finished sends free their slots; copied chunks go on the wire in
 * order; free slots take the next chunks out of the device. */
static bt_status advance_send(bt_backend *b, stage_msg *m)
{
    staging_state *s = b->impl;
    bt_status st = BT_OK;
    for (int i = 0; i < s->n_slots && st == BT_OK; i++)
        if (m->slots[i].state == SLOT_WIRE && wire_done(&m->slots[i], &st)) {
            slot_release(s, &m->slots[i]);
            m->n_done++;
        }
    stage_slot *ready;
    while (st == BT_OK && m->next_wire < m->n_chunks && wire_turn(m) &&
           (ready = slot_holding(m, s->n_slots, m->next_wire, SLOT_COPY)) != NULL &&
           copy_done(b, ready, &st) && st == BT_OK)
        st = wire_post(b, m, ready);
    int i;
    while (st == BT_OK && m->next_copy < m->n_chunks && (i = slot_free_index(m, s->n_slots)) >= 0) {
        stage_slot *slot = &m->slots[i];
        slot->chunk = m->next_copy++;
        slot->buf = buf_get(b, &st);
        if (slot->buf) st = copy_chunk(b, m, slot);
    }
    return st;
}

/* Receiver: copies done free their slots; arrived chunks are copied to the
 * device; free slots receive the next chunks, in order. */
static bt_status advance_recv(bt_backend *b, stage_msg *m)
{
    staging_state *s = b->impl;
    bt_status st = BT_OK;
    for (int i = 0; i < s->n_slots && st == BT_OK; i++) {
        stage_slot *slot = &m->slots[i];
        if (slot->state == SLOT_COPY && copy_done(b, slot, &st) && st == BT_OK) {
            slot_release(s, slot);
            m->n_done++;
        } else if (slot->state == SLOT_WIRE && wire_done(slot, &st) && st == BT_OK) {
            st = copy_chunk(b, m, slot);
        }
    }
    int i;
    while (st == BT_OK && m->next_wire < m->n_chunks && wire_turn(m) &&
           (i = slot_free_index(m, s->n_slots)) >= 0) {
        stage_slot *slot = &m->slots[i];
        slot->chunk = m->next_wire;
        slot->buf = buf_get(b, &st);
        if (slot->buf) st = wire_post(b, m, slot);
    }
    return st;
}

static void msg_unlink(staging_state *s, stage_msg *m)
{
    if (m->prev) m->prev->next = m->next;
    else s->head = m->next;
    if (m->next) m->next->prev = m->prev;
    else s->tail = m->prev;
}

/* Forgets m: its wire messages still under way are cancelled and its copies
 * waited for (they write into the user's buffer or a slot), its slots freed. */
static void msg_drop(bt_backend *b, stage_msg *m)
{
    staging_state *s = b->impl;
    for (int i = 0; i < s->n_slots; i++) {
        stage_slot *slot = &m->slots[i];
        if (slot->state == SLOT_WIRE && !slot->wire.done)
            slot->wire.backend->ops->cancel(slot->wire.backend, &slot->wire);
        for (long polls = 0; slot->state == SLOT_COPY && polls < 100000000L; polls++)
            if (b->world->hooks.event_query(slot->buf->event) != 0) break;
        if (slot->state != SLOT_FREE) slot_release(s, slot);
    }
    m->req->impl = NULL;
    msg_unlink(s, m);
    free(m);
}

static void msg_finish(bt_backend *b, stage_msg *m, bt_status st)
{
    m->req->done = 1;
    m->req->status = st;
    msg_drop(b, m);
}

static void staging_progress(bt_backend *b)
{
    staging_state *s = b->impl;
    for (stage_msg *m = s->head, *next; m; m = next) {
        next = m->next;
        bt_status st = m->req->kind == BT_REQ_SEND ? advance_send(b, m) : advance_recv(b, m);
        if (st != BT_OK || m->n_done == m->n_chunks) msg_finish(b, m, st);
    }
}

/* ------------------------------------------------------------------ the table */

static bt_status post(bt_backend *b, bt_request *req)
{
    staging_state *s = b->impl;
    stage_msg *m = calloc(1, sizeof *m);
    if (!m) return bt_fail(b->world, BT_ERR_SYS, "out of memory for a staged message");
    m->req = req;
    m->n_chunks = req->bytes ? (req->bytes + s->chunk_bytes - 1) / s->chunk_bytes : 1;
    m->prev = s->tail;
    if (s->tail) s->tail->next = m;
    else s->head = m;
    s->tail = m;
    req->impl = m;
    staging_progress(b); /* start the first copies or receives now */
    return BT_OK;
}

static bt_status staging_isend(bt_backend *b, bt_request *req, const void *buf)
{
    (void)buf; /* req->buf */
    return post(b, req);
}

static bt_status staging_irecv(bt_backend *b, bt_request *req) { return post(b, req); }

static void staging_test(bt_backend *b, bt_request *req)
{
    if (!req->done) staging_progress(b);
}

/* Drops an unfinished message after an error. */
static void staging_cancel(bt_backend *b, bt_request *req)
{
    if (req->impl) msg_drop(b, req->impl);
}

/* Every staged send has put all its chunks on the wire (the host backend's
 * flush, after this one, waits for the wire). */
static int sends_posted(void *arg, bt_status *st)
{
    (void)st;
    const staging_state *s = arg;
    for (const stage_msg *m = s->head; m; m = m->next)
        if (m->req->kind == BT_REQ_SEND && m->next_wire < m->n_chunks) return 0;
    return 1;
}

static bt_status staging_flush(bt_backend *b)
{
    return bt_poll_wait(b->world, sends_posted, b->impl, "staged device sends to leave");
}

static void staging_finalize(bt_backend *b)
{
    staging_state *s = b->impl;
    const bt_device_hooks *h = &b->world->hooks;
    while (s->head) staging_cancel(b, s->head->req);
    /* Destroying a stream runs what it still has queued. */
    if (s->d2h_stream) h->stream_destroy(s->d2h_stream);
    if (s->h2d_stream) h->stream_destroy(s->h2d_stream);
    for (int i = 0; i < s->n_bufs; i++) {
        h->event_destroy(s->owned[i]->event);
        h->host_free(s->owned[i]->host);
        free(s->owned[i]);
    }
    free(s->owned);
    free(s);
    free(b);
}

static const bt_backend_ops staging_ops = {
    .name = "staged",
    .mem_kinds = BT_MEM_BIT(BT_MEM_DEVICE),
    .isend = staging_isend,
    .irecv = staging_irecv,
    .test = staging_test,
    .cancel = staging_cancel,
    .progress = staging_progress,
    .flush = staging_flush,
    .finalize = staging_finalize,
    .group_end = NULL,
};

/* ------------------------------------------------------------------ the pool */

bt_status bt_staging_reserve(bt_world *w, int messages)
{
    if (!w || !w->device_set || messages < 0 || messages > STAGE_MESSAGES_MAX) return BT_ERR_ARG;
    bt_status st = (bt_status)atomic_load(&w->failed);
    if (st != BT_OK || !w->staging) return st; /* no peer is staged: nothing to take */
    staging_state *s = w->staging->impl;
    int want = messages * s->n_slots;
    while (st == BT_OK && s->n_bufs < want) {
        bt_stage_buf *sb = buf_new(w->staging, &st);
        if (sb) buf_put(s, sb), s->reserved++;
    }
    return st;
}

bt_status bt_staging_lend(bt_world *w, int n, bt_stage_buf **bufs, void **d2h_stream,
                          void **h2d_stream)
{
    bt_status st = BT_OK;
    if (!w->staging) return BT_ERR_ARG;
    staging_state *s = w->staging->impl;
    int lent = 0;
    while (st == BT_OK && lent < n)
        if ((bufs[lent] = buf_get(w->staging, &st)) != NULL) lent++;
    if (st != BT_OK) {
        bt_staging_take_back(w, lent, bufs);
        return st;
    }
    *d2h_stream = s->d2h_stream;
    *h2d_stream = s->h2d_stream;
    return BT_OK;
}

void bt_staging_take_back(bt_world *w, int n, bt_stage_buf **bufs)
{
    staging_state *s = w->staging->impl;
    for (int i = 0; i < n; i++) buf_release(s, bufs[i]);
}

bt_staging_stats bt_staging_stats_of(const bt_world *w)
{
    bt_staging_stats out = {0};
    if (!w || !w->staging) return out;
    const staging_state *s = w->staging->impl;
    out.chunk_bytes = s->chunk_bytes;
    out.slots = s->n_slots;
    out.reserved = s->reserved;
    out.grown = s->grown;
    out.peak_in_use = s->peak_in_use;
    return out;
}

bt_status bt_backend_staging_create(bt_world *w, size_t chunk_bytes, bt_backend **out)
{
    *out = NULL;
    bt_backend *b = calloc(1, sizeof *b);
    staging_state *s = calloc(1, sizeof *s);
    if (!b || !s) {
        free(b), free(s);
        return bt_fail(w, BT_ERR_SYS, "out of memory for the staging backend");
    }
    b->ops = &staging_ops;
    b->world = w;
    b->impl = s;
    s->chunk_bytes = chunk_bytes;
    s->n_slots = slots_setting();
    if (w->hooks.stream_create(&s->d2h_stream) != 0 || w->hooks.stream_create(&s->h2d_stream) != 0) {
        bt_status st = bt_device_fail(b->world, "creating the staging streams");
        staging_finalize(b);
        return st;
    }
    *out = b;
    return BT_OK;
}
