/* ulysses.c: see ulysses.h. A buffer crosses the group in two moves: the
 * heads' split (bk_swap_axes: [n, U, H/U d] -> [U, n, H/U d], block j for
 * member j) and the all-to-all, whose receive, block i from member i, is
 * [U n, H/U, d] in member order: the group's tokens in the order the ring's
 * layout lists them (seq_layout.h). Back: the all-to-all of [U n, H/U, d]
 * (member j's rows to member j), then the inverse swap. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "src/attn/kernel_status.h"
#include "src/attn/ulysses.h"
#include "util/clock.h"

/* What one pass's buffers hold, in floats, for U members. */
typedef struct {
    size_t q, kv, lse; /* [n, Hq, d], [n, Hkv, d], [n, Hq]: a rank's share of the heads'
                          layout holds the same count */
} ulysses_sizes;

/* The buffers in one order, with their floats: each a piece of its own of
 * the queue's memory, since a device kernel's accesses count for its whole
 * piece (the ring receives into q and d_o while its kernels read lse). */
enum { U_Q, U_O, U_DO, U_DQ, U_STAGE, U_KV, U_DKV, U_LSE, U_BUFS };

struct ulysses {
    ulysses_config cfg;
    int U;
    const bk_queue *queue;
    bt_mem mem;
    /* the head-split pass: inputs, outputs, gradients ([dK | dV] one buffer,
     * as RING_CALLER_MEMORY asks), and the staging of each split */
    float *buf[U_BUFS];
};

int ulysses_check(int U, int h_q, int h_kv, char *err, size_t err_len)
{
    if (U >= 1 && h_q % U == 0 && h_kv % U == 0) return 0;
    snprintf(err, err_len,
             "ulysses = %d must divide the query heads (%d) and the key/value heads (%d): each "
             "member of a group takes 1/U of both",
             U, h_q, h_kv);
    return -1;
}

static ulysses_sizes sizes_of(const ulysses_config *c)
{
    size_t n = (size_t)c->n, d = (size_t)c->d;
    return (ulysses_sizes){n * (size_t)c->h_q * d, n * (size_t)c->h_kv * d, n * (size_t)c->h_q};
}

static void buffer_floats(const ulysses_sizes *s, size_t floats[U_BUFS])
{
    const size_t f[U_BUFS] = {s->q, s->q, s->q, s->q, s->q, 2 * s->kv, 2 * s->kv, s->lse};
    memcpy(floats, f, sizeof f);
}

size_t ulysses_bytes(const ulysses_config *cfg)
{
    ulysses_sizes s = sizes_of(cfg);
    size_t floats[U_BUFS], total = 0;
    buffer_floats(&s, floats);
    for (int i = 0; i < U_BUFS; i++) total += floats[i] * sizeof(float);
    return total;
}

ulysses *ulysses_create(const ulysses_config *cfg, const bk_queue *q)
{
    ulysses *u = calloc(1, sizeof *u);
    if (!u) return NULL;
    u->cfg = *cfg;
    u->U = bt_comm_size(cfg->group);
    u->queue = q;
    u->mem = q->where == BK_DEVICE ? BT_MEM_DEVICE : BT_MEM_HOST;
    ulysses_sizes s = sizes_of(cfg);
    size_t floats[U_BUFS];
    buffer_floats(&s, floats);
    for (int i = 0; i < U_BUFS; i++)
        if (bk_alloc(q, floats[i] * sizeof(float), (void **)&u->buf[i]) != BK_OK) {
            ulysses_free(u);
            return NULL;
        }
    return u;
}

void ulysses_free(ulysses *u)
{
    if (!u) return;
    for (int i = 0; i < U_BUFS; i++) bk_free(u->queue, u->buf[i]);
    free(u);
}

/* The queue's work on what the all-to-all reads is done (a device queue runs
 * behind the host; the transport reads device memory at once). */
static bt_status queue_done(const ulysses *u)
{
    if (u->queue->where != BK_DEVICE) return BT_OK;
    return attn_kernel_status(bk_device_sync(u->queue));
}

/* dst [U n, heads / U, width] = the group's rows of this member's head group,
 * from src [n, heads, width] of every member. */
static bt_status to_heads(ulysses *u, const float *src, int heads, int width, float *dst)
{
    int64_t part = (int64_t)heads / u->U * width;
    BT_CHECK(
        attn_kernel_status(bk_swap_axes(u->queue, u->cfg.n, u->U, part, src, u->buf[U_STAGE])));
    BT_CHECK(queue_done(u));
    return bt_alltoall_mem(u->cfg.group, u->buf[U_STAGE], dst,
                           (size_t)(u->cfg.n * part) * sizeof(float), u->mem);
}

/* The inverse: dst [n, heads, width] from src [U n, heads / U, width]. */
static bt_status from_heads(ulysses *u, const float *src, int heads, int width, float *dst)
{
    int64_t part = (int64_t)heads / u->U * width;
    BT_CHECK(queue_done(u));
    BT_CHECK(bt_alltoall_mem(u->cfg.group, src, u->buf[U_STAGE],
                             (size_t)(u->cfg.n * part) * sizeof(float), u->mem));
    return attn_kernel_status(bk_swap_axes(u->queue, u->U, u->cfg.n, part, u->buf[U_STAGE], dst));
}

/* Q [n, Hq, d], K, V [n, Hkv, d] into the heads' layout: u's Q and [K | V]. */
static bt_status qkv_to_heads(ulysses *u, const float *Q, const float *K, const float *V)
{
    const ulysses_config *g = &u->cfg;
    BT_CHECK(to_heads(u, Q, g->h_q, g->d, u->buf[U_Q]));
    BT_CHECK(to_heads(u, K, g->h_kv, g->d, u->buf[U_KV]));
    return to_heads(u, V, g->h_kv, g->d, u->buf[U_KV] + sizes_of(g).kv);
}

/* The all-to-alls' wall time, added once the ring (which sets stats) is
 * done: the pass's, and exposed. */
static void count_exchange(ring_exec_stats *stats, double exchanged_s)
{
    stats->total_s += exchanged_s;
    stats->wait_s += exchanged_s;
}

bt_status ulysses_forward(ulysses *u, const ring_exec_ctx *c, const float *Q, const float *K,
                          const float *V, float *O, float *lse, ring_exec_stats *stats)
{
    const ulysses_config *g = &u->cfg;
    float **b = u->buf, *k = b[U_KV], *v = k + sizes_of(g).kv;
    double t0 = bu_now();
    BT_CHECK(qkv_to_heads(u, Q, K, V));
    double exchanged = bu_now() - t0;
    BT_CHECK(ring_forward(c, b[U_Q], k, v, b[U_O], b[U_LSE], stats));
    t0 = bu_now();
    BT_CHECK(from_heads(u, b[U_O], g->h_q, g->d, O));
    BT_CHECK(from_heads(u, b[U_LSE], g->h_q, 1, lse));
    count_exchange(stats, exchanged + bu_now() - t0);
    return BT_OK;
}

bt_status ulysses_backward(ulysses *u, const ring_exec_ctx *c, const float *Q, const float *K,
                           const float *V, const float *O, const float *dO, const float *lse,
                           float *dQ, float *dK, float *dV, ring_exec_stats *stats)
{
    const ulysses_config *g = &u->cfg;
    size_t kv = sizes_of(g).kv;
    float **b = u->buf, *k = b[U_KV], *dk = b[U_DKV];
    double t0 = bu_now();
    /* every input split before any gradient is written: dQ may be O, dK K */
    BT_CHECK(qkv_to_heads(u, Q, K, V));
    BT_CHECK(to_heads(u, O, g->h_q, g->d, b[U_O]));
    BT_CHECK(to_heads(u, dO, g->h_q, g->d, b[U_DO]));
    BT_CHECK(to_heads(u, lse, g->h_q, 1, b[U_LSE]));
    double exchanged = bu_now() - t0;
    ring_exec_ctx rc = *c;
    rc.spend[0] = b[U_Q], rc.spend[1] = b[U_DO]; /* ours, read by nothing after the ring */
    BT_CHECK(ring_backward(&rc, b[U_Q], k, k + kv, b[U_O], b[U_DO], b[U_LSE], b[U_DQ], dk, dk + kv,
                           stats));
    t0 = bu_now();
    BT_CHECK(from_heads(u, b[U_DQ], g->h_q, g->d, dQ));
    BT_CHECK(from_heads(u, dk, g->h_kv, g->d, dK));
    BT_CHECK(from_heads(u, dk + kv, g->h_kv, g->d, dV));
    count_exchange(stats, exchanged + bu_now() - t0);
    return BT_OK;
}
