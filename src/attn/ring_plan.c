/* ring_plan.c: the planner of distributed attention; see ring_plan.h.
 * It decides, for every block, which holders compute it (the mask), how far it
 * must travel (the farthest holder that computes, through the holders that
 * relay it), which buffer slot it lands in, and the path of its trailing
 * accumulator. The executor (ring.h) only follows these decisions. */
#include <stdlib.h>
#include <string.h>

#include "src/attn/ring_plan.h"
#include "util/alloc.h"

const char *ring_pass_name(ring_pass pass)
{
    switch (pass) {
    case RING_FORWARD: return "forward";
    case RING_BWD_KV_SIDE: return "backward (KV-side: K, V, dK, dV travel)";
    case RING_BWD_Q_SIDE: return "backward (Q-side: Q, dO, lse, delta travel; dQ follows)";
    }
    return "?";
}

ring_pass ring_choose_backward(ring_bwd_choice choice, int h_q, int h_kv, int d, int in_bytes)
{
    if (choice == BWD_KV_SIDE) return RING_BWD_KV_SIDE;
    if (choice == BWD_Q_SIDE) return RING_BWD_Q_SIDE;
    int64_t e = in_bytes ? in_bytes : 4, q = (int64_t)h_q * d, kv = (int64_t)h_kv * d;
    int64_t q_side = 2 * q * e + 2 * (int64_t)h_q * 4 + q * 4, kv_side = 2 * kv * e + 2 * kv * 4;
    return q_side <= kv_side ? RING_BWD_Q_SIDE : RING_BWD_KV_SIDE;
}

/* Keys travel towards later ranks (forward, KV-side), whose queries need them
 * under causal and window masks; query bundles (Q-side) travel the other way,
 * towards the ranks holding earlier keys, so under a sliding window both go
 * only as far as the window reaches. */
static int holder(const ring_schedule *s, int block, int step)
{
    int m = step / s->L, t = step % s->L, bn = block / s->L, bl = block % s->L;
    if (s->pass == RING_BWD_Q_SIDE) {
        m = (s->M - m % s->M) % s->M;
        t = (s->L - t) % s->L;
    }
    return ((bn + m) % s->M) * s->L + (bl + t) % s->L;
}

int ring_slot_of_step(const ring_schedule *s, int step)
{
    int m = step / s->L, t = step % s->L;
    if (step == 0) return SLOT_HOME;
    if (t == 0) return SLOT_INTER0 + m % 2;
    return SLOT_INTRA0 + t % 2;
}

static ring_link link_between(const ring_schedule *s, int a, int b)
{
    return a / s->L == b / s->L ? LINK_INTRA : LINK_INTER;
}

static int input_channel(ring_pass pass, ring_link link)
{
    if (pass == RING_FORWARD) return link == LINK_INTRA ? RING_CH_FWD_INTRA : RING_CH_FWD_INTER;
    return link == LINK_INTRA ? RING_CH_BWD_IN_INTRA : RING_CH_BWD_IN_INTER;
}

static int acc_channel(ring_link link)
{
    return link == LINK_INTRA ? RING_CH_BWD_ACC_INTRA : RING_CH_BWD_ACC_INTER;
}

void ring_schedule_free(ring_schedule *s)
{
    if (!s) return;
    free(s->steps);
    free(s->home_acc_from);
    free(s->home_acc_channel);
    free(s);
}

/* The configuration's own checks; M is the number of nodes of the ring. */
static int plan_config_ok(const ring_plan_config *cfg, int M, char *err, size_t err_len)
{
    int P = cfg->layout.P;
    if (M < 1 || P % M != 0) {
        snprintf(err, err_len, "double ring: %d ranks do not split into %d nodes of equal size", P,
                 M);
        return 0;
    }
    if (cfg->h_kv < 1 || cfg->h_q < cfg->h_kv || cfg->h_q % cfg->h_kv != 0 || cfg->d < 8 ||
        cfg->d % 8 != 0) {
        snprintf(err, err_len, "heads Hq=%d, Hkv=%d, d=%d: Hq must be a multiple of Hkv and d a "
                               "multiple of 8", cfg->h_q, cfg->h_kv, cfg->d);
        return 0;
    }
    if (cfg->in_bytes != 0 && cfg->in_bytes != 4 && cfg->in_bytes != 2) {
        snprintf(err, err_len, "inputs of %d bytes an element: 4 (fp32) or 2 (bf16)",
                 cfg->in_bytes);
        return 0;
    }
    return attn_need_validate(&cfg->need, err, err_len) == 0;
}

/* An empty schedule for P ranks on M nodes: its shape, the bytes a block and
 * an accumulator take, every step idle; NULL with err when out of memory. */
static ring_schedule *schedule_new(const ring_plan_config *cfg, ring_pass pass, int M, char *err,
                                   size_t err_len)
{
    int P = cfg->layout.P;
    size_t p = (size_t)P;
    ring_schedule *s = bu_calloc(sizeof *s, "a ring schedule", err, err_len);
    if (!s) return NULL;
    s->steps = bu_calloc(p * p * sizeof *s->steps, "the ring's steps", err, err_len);
    s->home_acc_from = bu_calloc(p * sizeof(int), "the ring's accumulators", err, err_len);
    s->home_acc_channel = bu_calloc(p * sizeof(int), "the ring's accumulators", err, err_len);
    if (!s->steps || !s->home_acc_from || !s->home_acc_channel) { /* err names one */
        ring_schedule_free(s);
        return NULL;
    }
    s->pass = pass;
    s->topo = cfg->topo;
    s->P = P;
    s->M = M;
    s->L = P / M;
    s->layout = cfg->layout;
    s->h_q = cfg->h_q;
    s->h_kv = cfg->h_kv;
    s->d = cfg->d;
    s->n_steps = P;
    s->pairs_counted = cfg->count_pairs;
    s->in_bytes = cfg->in_bytes ? cfg->in_bytes : 4;
    size_t n = (size_t)cfg->layout.n, f = sizeof(float), e = (size_t)s->in_bytes;
    size_t q_elems = n * (size_t)cfg->h_q * (size_t)cfg->d,
           kv_elems = n * (size_t)cfg->h_kv * (size_t)cfg->d;
    if (pass == RING_BWD_Q_SIDE) { /* [Q | dO | lse | delta], dQ */
        s->input_bytes = 2 * q_elems * e + 2 * n * (size_t)cfg->h_q * f;
        s->acc_bytes = q_elems * f;
    } else { /* [K | V], and backward [dK | dV] */
        s->input_bytes = 2 * kv_elems * e;
        s->acc_bytes = pass == RING_BWD_KV_SIDE ? 2 * kv_elems * f : 0;
    }
    for (int r = 0; r < P; r++) {
        s->home_acc_from[r] = -1;
        for (int st = 0; st < P; st++) {
            ring_step *x = ring_step_at(s, r, st);
            x->block = -1;
            x->slot = -1;
            x->acc_from = x->acc_to = -1;
        }
    }
    return s;
}

/* The planner's scratch: each rank's chunks of the sequence, and for the
 * block being planned, the pairs each step computes and whether each step's
 * holder must have the block. */
typedef struct {
    seq_chunk (*chunks)[2]; /* [P][2] */
    int *n_chunks;          /* [P] */
    int64_t *pairs;         /* [P] by step */
    char *required;         /* [P] by step */
} plan_scratch;

static void scratch_free(plan_scratch *w)
{
    free(w->chunks), free(w->n_chunks), free(w->pairs), free(w->required);
}

static int scratch_new(const seq_layout *layout, plan_scratch *w, char *err, size_t err_len)
{
    size_t p = (size_t)layout->P;
    w->chunks = bu_calloc(p * sizeof *w->chunks, "the ring planner", err, err_len);
    w->n_chunks = bu_calloc(p * sizeof(int), "the ring planner", err, err_len);
    w->pairs = bu_calloc(p * sizeof(int64_t), "the ring planner", err, err_len);
    w->required = bu_calloc(p, "the ring planner", err, err_len);
    if (!w->chunks || !w->n_chunks || !w->pairs || !w->required) { /* err names one */
        scratch_free(w);
        return -1;
    }
    for (int r = 0; r < layout->P; r++) w->n_chunks[r] = seq_layout_chunks(layout, r, w->chunks[r]);
    return 0;
}

/* w->pairs[st]: the pairs the holder of block b at step st computes, its
 * queries against b's keys, or (Q-side) b's queries against its keys. */
static void block_pairs(const ring_schedule *s, const ring_plan_config *cfg, int b,
                        plan_scratch *w)
{
    for (int st = 0; st < s->P; st++) {
        int h = holder(s, b, st), q = s->pass == RING_BWD_Q_SIDE ? b : h,
            k = s->pass == RING_BWD_Q_SIDE ? h : b;
        w->pairs[st] = attn_need_pairs(&cfg->need, w->chunks[q], w->n_chunks[q], w->chunks[k],
                                       w->n_chunks[k], cfg->count_pairs);
    }
}

/* w->required[st]: whether the holder at step st needs the block, because it
 * computes it or must pass it on to one that does: the next intra step, or
 * (at a round start) the same local index on the next node one round later.
 * The double ring carries a block through every step up to the last that
 * computes it, so that its trailing accumulator can follow the same path in
 * step order. */
static void block_path(const ring_schedule *s, plan_scratch *w)
{
    int P = s->P, last = 0;
    for (int st = 0; st < P; st++)
        if (w->pairs[st] > 0) last = st;
    for (int st = P - 1; st >= 0; st--) {
        w->required[st] = w->pairs[st] > 0;
        if (st + 1 < P && (st + 1) % s->L != 0 && w->required[st + 1]) w->required[st] = 1;
        if (st % s->L == 0 && st + s->L < P && w->required[st + s->L]) w->required[st] = 1;
        if (s->topo == TOPO_DOUBLE && st <= last) w->required[st] = 1;
    }
    w->required[0] = 1;
}

/* Block b's holders along its path, each with the slot it lands in, and the
 * send and receive that bring it there from the previous holder. */
static void route_block(ring_schedule *s, int b, const plan_scratch *w)
{
    for (int st = 0; st < s->P; st++) {
        if (!w->required[st]) continue;
        int h = holder(s, b, st);
        ring_step *x = ring_step_at(s, h, st);
        x->block = b;
        x->slot = ring_slot_of_step(s, st);
        x->compute = w->pairs[st] > 0;
        x->pairs = w->pairs[st];
        if (st == 0) continue;
        int src = st % s->L != 0 ? st - 1 : st - s->L, from = holder(s, b, src);
        ring_link link = link_between(s, from, h);
        ring_xfer xf = {0, b, 0, input_channel(s->pass, link), link};
        ring_step *sender = ring_step_at(s, from, src), *receiver = ring_step_at(s, h, src);
        xf.peer = h;
        xf.slot = ring_slot_of_step(s, src);
        sender->send[sender->n_send++] = xf;
        xf.peer = from;
        xf.slot = ring_slot_of_step(s, st);
        receiver->recv[receiver->n_recv++] = xf;
    }
}

/* The trailing accumulator of block b follows the block one step behind
 * through every holder (each adds its share, relays add nothing), so between
 * any two ranks, on one channel, accumulators travel in step order. The last
 * holder sends it home on a channel of its own, at the end of its step, and
 * home receives it in the same step; each trailing accumulator's receive is
 * posted at the end of the step its sender sends it too (doc/TRANSPORT.md:
 * both ends of every grouped transfer are posted in the same step). */
static void route_accumulator(ring_schedule *s, int b, const plan_scratch *w)
{
    int prev = -1, last = 0;
    for (int st = 0; st < s->P; st++) {
        if (!w->required[st]) continue;
        int h = holder(s, b, st);
        if (prev >= 0) {
            ring_step *a = ring_step_at(s, prev, st - 1), *c = ring_step_at(s, h, st);
            a->acc_to = h;
            a->acc_to_channel = acc_channel(link_between(s, prev, h));
            c->acc_from = prev;
            c->acc_from_channel = a->acc_to_channel;
        }
        prev = h;
        last = st;
    }
    if (prev != b) {
        ring_step *a = ring_step_at(s, prev, last);
        a->acc_to = b;
        a->acc_to_channel = RING_CH_BWD_ACC_HOME;
        s->home_acc_from[b] = prev;
        s->home_acc_channel[b] = RING_CH_BWD_ACC_HOME;
        ring_step_at(s, b, last)->home_acc_in = 1;
    }
}

ring_schedule *ring_plan(const ring_plan_config *cfg, ring_pass pass, char *err, size_t err_len)
{
    int M = cfg->topo == TOPO_DOUBLE ? cfg->nodes : 1;
    if (!plan_config_ok(cfg, M, err, err_len)) return NULL;
    ring_schedule *s = schedule_new(cfg, pass, M, err, err_len);
    plan_scratch w;
    if (!s || scratch_new(&cfg->layout, &w, err, err_len) != 0) {
        ring_schedule_free(s);
        return NULL;
    }
    for (int b = 0; b < s->P; b++) {
        block_pairs(s, cfg, b, &w);
        block_path(s, &w);
        route_block(s, b, &w);
        if (pass != RING_FORWARD) route_accumulator(s, b, &w);
    }
    scratch_free(&w);
    return s;
}

uint64_t ring_schedule_bytes_sent(const ring_schedule *s, int rank)
{
    uint64_t total = 0;
    for (int st = 0; st < s->n_steps; st++) {
        const ring_step *x = ring_step_at(s, rank, st);
        total += (uint64_t)x->n_send * s->input_bytes;
        if (x->acc_to >= 0) total += s->acc_bytes;
    }
    return total;
}

static const char *link_name(ring_link l) { return l == LINK_INTRA ? "intra" : "inter"; }

void ring_schedule_dump(FILE *out, const ring_schedule *s)
{
    fprintf(out, "schedule: %s\n", ring_pass_name(s->pass));
    fprintf(out, "  ring: %s, P=%d (%d node%s x %d ranks), layout %s, N=%lld, n=%lld per rank\n",
            s->topo == TOPO_DOUBLE ? "double (intra-node + inter-node)" : "flat", s->P, s->M,
            s->M == 1 ? "" : "s", s->L, seq_layout_name(s->layout.kind), (long long)s->layout.N,
            (long long)s->layout.n);
    fprintf(out, "  heads Hq=%d Hkv=%d d=%d; travelling inputs %zu bytes, accumulator %zu bytes\n",
            s->h_q, s->h_kv, s->d, s->input_bytes, s->acc_bytes);
    for (int r = 0; r < s->P; r++) {
        fprintf(out, "rank %d (node %d, local %d): sends %llu bytes\n", r, r / s->L, r % s->L,
                (unsigned long long)ring_schedule_bytes_sent(s, r));
        for (int st = 0; st < s->n_steps; st++) {
            const ring_step *x = ring_step_at(s, r, st);
            fprintf(out, "  step %2d:", st);
            if (x->block < 0)
                fprintf(out, " idle");
            else
                fprintf(out, " block %d (slot %d) %s", x->block, x->slot,
                        x->compute ? "compute" : "relay only");
            if (s->pairs_counted && x->compute) fprintf(out, " [%lld pairs]", (long long)x->pairs);
            for (int k = 0; k < x->n_send; k++)
                fprintf(out, "; send block %d -> %d (%s, ch %d)", x->send[k].block,
                        x->send[k].peer, link_name(x->send[k].link), x->send[k].channel);
            for (int k = 0; k < x->n_recv; k++)
                fprintf(out, "; recv block %d <- %d into slot %d (%s, ch %d)", x->recv[k].block,
                        x->recv[k].peer, x->recv[k].slot, link_name(x->recv[k].link),
                        x->recv[k].channel);
            if (x->acc_from >= 0) fprintf(out, "; acc += from %d", x->acc_from);
            if (x->acc_to >= 0) fprintf(out, "; acc -> %d%s", x->acc_to, x->acc_to == x->block ? " (home)" : "");
            if (x->home_acc_in) fprintf(out, "; own acc <- %d", s->home_acc_from[r]);
            fprintf(out, "\n");
        }
        if (s->pass != RING_FORWARD && s->home_acc_from[r] >= 0)
            fprintf(out, "  end: final accumulator of block %d arrives from rank %d\n", r,
                    s->home_acc_from[r]);
        else if (s->pass != RING_FORWARD)
            fprintf(out, "  end: final accumulator of block %d is computed at home\n", r);
    }
}
