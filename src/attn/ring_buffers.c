/* ring_buffers.c: the working buffers of a ring (ring.h), in the memory of the
 * queue the ring computes on, and the position tables of the blocks.
 *
 * The kernels read the positions from tables of every block, one per layout,
 * made with the buffers: positions never change within a run. Under a
 * document mask the ids change with each sample, so there each block's
 * positions and ids are loaded as the ring reaches it: on a device the
 * layout computes them on the host, into one of two host mirrors uploaded on
 * the ring's queue.
 * Two mirrors, each with the event of its last upload, because an upload
 * runs when the queue reaches it: the mirror filled next must not be the one
 * a queued upload still reads. One device table suffices, since the kernels
 * that read it and the upload that replaces it run in the queue's order.
 * Also on a device: the event of the queue's last use of each buffer the
 * transport touches (ring_run.h says who records and who waits). */
#include <stdlib.h>
#include <string.h>

#include "kernels/device.h"
#include "src/attn/ring_buffers.h"

/* The slots, then 4 trailing accumulators, the home accumulator, delta, 4
 * tables, the bf16 home inputs and the position tables of each layout. */
enum { N_BUFFERS = RING_N_SLOTS + 11 + RING_MAX_LAYOUTS };

/* Bits of ring_buffers.used, in buffer_sizes' order. */
enum {
    USED_ACC_OUT = RING_N_SLOTS,
    USED_ACC_IN = RING_N_SLOTS + 2,
    USED_HOME_ACC = RING_N_SLOTS + 4
};

/* The buffers some step of s may touch, whatever its mask: step t holds
 * ring_slot_of_step(t) and, in a backward, computes into acc_out[t % 2],
 * may receive into acc_in[t % 2] (t >= 1) and, with more than one rank, may
 * receive its home accumulator. One rank (no transfers) needs one slot and
 * one accumulator; one node never the inter-node slots. */
static unsigned buffers_used(const ring_schedule *s)
{
    unsigned used = 0;
    for (int t = 0; t < s->P; t++) {
        used |= 1u << ring_slot_of_step(s, t);
        if (s->pass == RING_FORWARD) continue;
        used |= 1u << (USED_ACC_OUT + t % 2);
        if (t >= 1) used |= 1u << (USED_ACC_IN + t % 2);
    }
    if (s->pass != RING_FORWARD && s->P > 1) used |= 1u << USED_HOME_ACC;
    return used;
}

int ring_buffers_serve(const ring_buffers *b, const ring_schedule *s)
{
    unsigned need = buffers_used(s);
    return (b->used & need) == need;
}

static int same_layout(const seq_layout *a, const seq_layout *b)
{
    return a->kind == b->kind && a->P == b->P && a->N == b->N;
}

/* l among the layouts b keeps position tables of (the first RING_MAX_LAYOUTS;
 * a ring of any other loads its positions step by step). */
static void note_layout(ring_buffers *b, const seq_layout *l)
{
    for (int k = 0; k < b->n_tables; k++)
        if (same_layout(&b->table_layout[k], l)) return;
    if (b->n_tables < RING_MAX_LAYOUTS) b->table_layout[b->n_tables++] = *l;
}

/* The capacities b needs for each of scheds[n_scheds] made with flags: the
 * largest of each, the buffers any of them uses, and the accumulators every
 * backward among them can keep in its inputs. */
static void buffer_capacities(const ring_schedule *const *scheds, int n_scheds, unsigned flags,
                              ring_buffers *b)
{
    b->lent = flags & RING_CALLER_MEMORY ? 4 : 0;
    b->home_lent = (flags & RING_CALLER_MEMORY) != 0;
    for (int i = 0; i < n_scheds; i++) {
        const ring_schedule *s = scheds[i];
        if (s->pass != RING_FORWARD && ring_accs_in_inputs(s) < b->lent)
            b->lent = ring_accs_in_inputs(s);
        b->used |= buffers_used(s);
        if (s->input_bytes > b->input_bytes) b->input_bytes = s->input_bytes;
        if (s->acc_bytes > b->acc_bytes) b->acc_bytes = s->acc_bytes;
        if (s->layout.n > b->n) b->n = s->layout.n;
        if (s->layout.n * s->h_q > b->rows) b->rows = s->layout.n * s->h_q;
        if (ring_home_in_bytes(s) > b->home_in_bytes) b->home_in_bytes = ring_home_in_bytes(s);
        note_layout(b, &s->layout);
    }
    if (!(b->used >> USED_ACC_OUT & 1)) b->lent = 0; /* no backward */
    if (!(b->used >> USED_HOME_ACC & 1)) b->home_lent = 0;
}

/* The bytes of each buffer of b, in the order ring_buffers_create allocates
 * them (slots, accumulators out and in, home accumulator, delta, positions,
 * document ids, bf16 home inputs); returns their count. */
static int buffer_sizes(const ring_buffers *b, size_t sizes[N_BUFFERS])
{
    int k = 0;
    size_t n = (size_t)b->n;
    for (int i = 0; i < RING_N_SLOTS; i++) sizes[k++] = b->input_bytes;
    for (int i = 0; i < 4; i++) sizes[k++] = b->acc_bytes;
    sizes[k++] = b->acc_bytes ? b->acc_bytes : 1;
    for (int i = 0; i <= USED_HOME_ACC; i++)
        if (!(b->used >> i & 1)) sizes[i] = 0; /* never touched: not made */
    for (int i = 0; i < b->lent; i++)          /* in the caller's inputs */
        sizes[(ring_lent(i).in ? USED_ACC_IN : USED_ACC_OUT) + ring_lent(i).index] = 0;
    if (b->home_lent) sizes[USED_HOME_ACC] = 0;
    sizes[k++] = ((size_t)b->rows + 1) * sizeof(float);
    sizes[k++] = n * sizeof(int64_t), sizes[k++] = n * sizeof(int64_t);
    sizes[k++] = n * sizeof(int32_t), sizes[k++] = n * sizeof(int32_t);
    sizes[k++] = b->home_in_bytes;
    for (int t = 0; t < b->n_tables; t++)
        sizes[k++] = (size_t)b->table_layout[t].N * sizeof(int64_t); /* [P][n] */
    return k;
}

/* The events of a ring on a device, in one list for making and destroying. */
enum { N_EVENTS = 2 + RING_N_SLOTS + 4 + 2 };
static int events_of(ring_buffers *b, void **ev[N_EVENTS])
{
    int k = 0;
    ev[k++] = &b->uploaded[0], ev[k++] = &b->uploaded[1];
    for (int i = 0; i < RING_N_SLOTS; i++) ev[k++] = &b->slot_used[i];
    ev[k++] = &b->acc_out_used[0], ev[k++] = &b->acc_out_used[1];
    ev[k++] = &b->acc_in_used[0], ev[k++] = &b->acc_in_used[1];
    ev[k++] = &b->home_acc_used, ev[k++] = &b->queue_mark;
    return k;
}

/* The device's host mirrors of the position tables, page-locked so that
 * their uploads are queued rather than run at once ([n] positions, then [n]
 * document ids, in one allocation), and the events; 0 or -1. */
static int make_device_side(ring_buffers *b)
{
    size_t n = (size_t)(b->n > 0 ? b->n : 1);
    for (int k = 0; k < 2; k++) {
        void *p = NULL;
        if (bk_host_pinned_malloc(n * (sizeof(int64_t) + sizeof(int32_t)), &p) != BK_OK) return -1;
        b->pos_host[k] = p;
        b->seg_host[k] = (int32_t *)(b->pos_host[k] + n);
    }
    void **ev[N_EVENTS];
    for (int k = 0, count = events_of(b, ev); k < count; k++)
        if (bk_device_event_create(ev[k]) != BK_OK) return -1;
    return 0;
}

/* Every block's positions of each layout into its table, once: on a device
 * through a host copy, uploaded and waited for (setup, not a step). 0 or -1. */
static int fill_tables(ring_buffers *b)
{
    for (int t = 0; t < b->n_tables; t++) {
        const seq_layout *l = &b->table_layout[t];
        int64_t *host = ring_buffers_on_device(b) ? malloc((size_t)l->N * sizeof(int64_t))
                                                  : b->pos_table[t];
        if (!host) return -1;
        for (int r = 0; r < l->P; r++) seq_layout_positions(l, r, host + (size_t)r * (size_t)l->n);
        int failed = host != b->pos_table[t] &&
                     bk_device_upload(&b->memory, b->pos_table[t], host,
                                      (size_t)l->N * sizeof(int64_t)) != BK_OK;
        if (host != b->pos_table[t]) free(host);
        if (failed) return -1;
    }
    return 0;
}

const int64_t *ring_buffers_table(const ring_buffers *b, const seq_layout *l, int block)
{
    for (int t = 0; t < b->n_tables; t++)
        if (same_layout(&b->table_layout[t], l)) return b->pos_table[t] + (size_t)block * (size_t)l->n;
    return NULL;
}

ring_buffers *ring_buffers_create(const ring_schedule *const *scheds, int n_scheds,
                                  const bk_queue *q, unsigned flags)
{
    ring_buffers *b = calloc(1, sizeof *b);
    if (!b) return NULL;
    b->memory = q != NULL ? *q : bk_host_queue();
    buffer_capacities(scheds, n_scheds, flags, b);
    size_t sizes[N_BUFFERS];
    int count = buffer_sizes(b, sizes), ok = 1;
    void *p[N_BUFFERS] = {NULL};
    /* on the host zeroed: the document ids stay 0 when the mask has no
     * segments (on a device every load writes them) */
    for (int i = 0; i < count; i++) ok &= !sizes[i] || bk_alloc(&b->memory, sizes[i], &p[i]) == BK_OK;
    int k = 0;
    for (int i = 0; i < RING_N_SLOTS; i++) b->slot[i] = p[k++];
    b->acc_out[0] = p[k++], b->acc_out[1] = p[k++], b->acc_in[0] = p[k++], b->acc_in[1] = p[k++];
    b->home_acc = p[k++], b->delta = p[k++];
    b->home_pos = p[k++], b->block_pos = p[k++], b->home_seg = p[k++], b->block_seg = p[k++];
    b->home_in = p[k++];
    for (int t = 0; t < b->n_tables; t++) b->pos_table[t] = p[k++];
    if (!ok || (ring_buffers_on_device(b) && make_device_side(b) != 0) || fill_tables(b) != 0) {
        ring_buffers_free(b);
        return NULL;
    }
    return b;
}

void ring_buffers_free(ring_buffers *b)
{
    if (!b) return;
    void *bufs[] = {b->acc_out[0], b->acc_out[1], b->acc_in[0],  b->acc_in[1],
                    b->home_acc,   b->delta,      b->home_pos,   b->block_pos,
                    b->home_seg,   b->block_seg,  b->home_in};
    for (int k = 0; k < RING_N_SLOTS; k++) bk_free(&b->memory, b->slot[k]);
    for (size_t k = 0; k < sizeof bufs / sizeof *bufs; k++) bk_free(&b->memory, bufs[k]);
    for (int t = 0; t < b->n_tables; t++) bk_free(&b->memory, b->pos_table[t]);
    for (int k = 0; k < 2; k++)
        if (b->pos_host[k]) bk_host_pinned_free(b->pos_host[k]);
    void **ev[N_EVENTS];
    for (int k = 0, count = events_of(b, ev); k < count; k++)
        if (*ev[k]) bk_device_event_destroy(*ev[k]);
    free(b);
}

size_t ring_buffers_bytes(const ring_schedule *const *scheds, int n_scheds, unsigned flags)
{
    ring_buffers b = {0};
    buffer_capacities(scheds, n_scheds, flags, &b);
    size_t sizes[N_BUFFERS], total = 0;
    int k = buffer_sizes(&b, sizes);
    for (int i = 0; i < k; i++) total += sizes[i];
    return total;
}

/* The positions of block under layout l (and, with segments [N], their
 * document ids) into pos[n], seg[n] of host memory. */
static void block_positions(const seq_layout *l, int block, const int32_t *segments, int64_t *pos,
                            int32_t *seg)
{
    seq_layout_positions(l, block, pos);
    for (int64_t i = 0; segments && i < l->n; i++) seg[i] = segments[pos[i]];
}

int ring_buffers_load_positions(ring_buffers *b, const bk_queue *q, const seq_layout *l, int block,
                                const int32_t *segments, int64_t *pos, int32_t *seg)
{
    if (!ring_buffers_on_device(b)) {
        block_positions(l, block, segments, pos, seg);
        return 0;
    }
    int k = b->parity ^= 1;
    if (bk_device_event_sync(b->uploaded[k]) != BK_OK) return -1; /* its last upload has run */
    memset(b->seg_host[k], 0, (size_t)l->n * sizeof(int32_t));
    block_positions(l, block, segments, b->pos_host[k], b->seg_host[k]);
    int failed = bk_device_upload_async(q, pos, b->pos_host[k], (size_t)l->n * sizeof(int64_t)) ||
                 bk_device_upload_async(q, seg, b->seg_host[k], (size_t)l->n * sizeof(int32_t)) ||
                 bk_device_event_record(b->uploaded[k], q);
    return failed ? -1 : 0;
}
