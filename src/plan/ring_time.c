/* ring_time.c: a ring pass priced as ring_run.c executes it (ring_time.h).
 *
 * The simulation walks the steps in order; within a step, every rank first
 * posts and waits (its start, the held block's arrival, its sends), then the
 * transfers posted in the step are timed (both ends known by then: a block
 * is always sent and received in the same step or earlier), then every rank
 * computes and, backward, takes its accumulator. Each block reaches a holder
 * at most once in a pass, so a transfer is named by (receiver, block). */
#include "src/plan/ring_time.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "util/alloc.h"

double ring_pair_flops(const ring_schedule *s)
{
    return 4.0 * s->d * s->h_q * (s->pass == RING_FORWARD ? 1.0 : 2.5);
}

/* A transfer into (receiver, block): when each end was posted (-1: not
 * yet), its bytes, link and sender, and when it arrives (-1: unknown). */
typedef struct {
    double send_post, recv_post, arrival;
    size_t bytes;
    ring_link link;
    int from;
} transfer;

typedef struct {
    const ring_schedule *s;
    const profile_row *link[2];                      /* intra, inter */
    double rate[2];                                  /* GFLOP/s: full, causal */
    double add_gbps;                                 /* the accumulators' adds (backward) */
    transfer *in, *acc;                              /* [P][P]: (receiver, block) */
    double *ready;                                   /* [P]: when each rank's last step ended */
    double *held;                                    /* [P]: when the block of this step is there */
    double *busy_compute, *busy_add, *sent_s, *done; /* [P] */
    int *computed;                                   /* [P] */
    int *leaving;                                    /* [nodes][2]: hops leaving by link */
    int per_node, nodes;                             /* the group's ranks per node, nodes */
} sim;

static transfer *at(transfer *t, const ring_schedule *s, int rank, int block)
{
    return &t[(size_t)rank * (size_t)s->P + (size_t)block];
}

/* The node of a rank of the group: the schedule's for the double ring; the
 * flat ring's plan has one node, so the group's ranks per node say. */
static int node_of(const sim *m, int rank)
{
    return rank / m->per_node;
}

static ring_link link_of(const sim *m, int from, int to)
{
    return node_of(m, from) == node_of(m, to) ? LINK_INTRA : LINK_INTER;
}

/* Seconds of a transfer of `bytes` on link whose node sends `sharing` hops
 * of that kind at once. */
static double hop_seconds(const profile_row *link, size_t bytes, int sharing)
{
    double share = sharing > link->per_node ? (double)link->per_node / sharing : 1.0;
    return link->latency_us * 1e-6 + (double)bytes / (link->gbps * 1e9 * share);
}

/* Times the transfers of t whose two ends are posted and whose arrival is
 * unknown, sharing each node's links among those leaving it now. */
static void time_posted(sim *m, transfer *t)
{
    const ring_schedule *s = m->s;
    size_t n = (size_t)s->P * (size_t)s->P;
    int *leaving = m->leaving;
    memset(leaving, 0, (size_t)m->nodes * 2 * sizeof(int));
    for (size_t i = 0; i < n; i++)
        if (t[i].send_post >= 0 && t[i].recv_post >= 0 && t[i].arrival < 0)
            leaving[node_of(m, t[i].from) * 2 + (int)t[i].link]++;
    for (size_t i = 0; i < n; i++) {
        transfer *x = &t[i];
        if (x->send_post < 0 || x->recv_post < 0 || x->arrival >= 0) continue;
        double d = hop_seconds(m->link[x->link], x->bytes,
                               leaving[node_of(m, x->from) * 2 + (int)x->link]);
        x->arrival = fmax(x->send_post, x->recv_post) + d;
        m->sent_s[x->from] += d;
        if (x->arrival > m->done[x->from]) m->done[x->from] = x->arrival; /* the send is done */
    }
}

/* A step's start on every rank: receives posted, the held block waited for,
 * its sends posted. */
static void post_step(sim *m, int step)
{
    const ring_schedule *s = m->s;
    for (int r = 0; r < s->P; r++) {
        const ring_step *x = ring_step_at(s, r, step);
        double start = m->ready[r];
        for (int k = 0; k < x->n_recv; k++) {
            transfer *t = at(m->in, s, r, x->recv[k].block);
            t->recv_post = start;
        }
        m->held[r] = start;
        if (x->block >= 0 && step > 0) {
            transfer *t = at(m->in, s, r, x->block);
            m->held[r] = fmax(start, t->arrival);
        }
        for (int k = 0; k < x->n_send; k++) {
            transfer *t = at(m->in, s, x->send[k].peer, x->send[k].block);
            t->send_post = m->held[r];
            t->bytes = s->input_bytes;
            t->link = link_of(m, r, x->send[k].peer);
            t->from = r;
        }
    }
}

/* Whether rank's step x runs at the causal rate: it holds the rank's own
 * block (the diagonal) and the mask leaves out some of its pairs. */
static int step_is_causal(const ring_schedule *s, int rank, const ring_step *x)
{
    return x->block == rank && (double)x->pairs < (double)s->layout.n * (double)s->layout.n;
}

/* A step's compute on every rank; backward, the trailing accumulator taken
 * (waited for, added) and sent on: its receiver posts the receive at the end
 * of the same step. */
static void compute_step(sim *m, int step)
{
    const ring_schedule *s = m->s;
    for (int r = 0; r < s->P; r++) {
        const ring_step *x = ring_step_at(s, r, step);
        double end = m->held[r];
        if (x->block >= 0 && x->compute) {
            int causal = step_is_causal(s, r, x);
            double c = (double)x->pairs * ring_pair_flops(s) / (m->rate[causal] * 1e9);
            end += c;
            m->busy_compute[r] += c;
            m->computed[r]++;
        }
        if (x->acc_from >= 0) {
            double add = 3.0 * (double)s->acc_bytes / (m->add_gbps * 1e9);
            end = fmax(end, at(m->acc, s, r, x->block)->arrival) + add;
            m->busy_add[r] += add;
        }
        m->ready[r] = end;
    }
    for (int r = 0; r < s->P; r++) { /* both ends of an accumulator's hop post at step end */
        const ring_step *x = ring_step_at(s, r, step);
        if (x->acc_to < 0) continue;
        transfer *t = at(m->acc, s, x->acc_to, x->block);
        t->send_post = m->ready[r];
        t->recv_post = m->ready[x->acc_to];
        t->bytes = s->acc_bytes;
        t->link = link_of(m, r, x->acc_to);
        t->from = r;
    }
    time_posted(m, m->acc);
}

static void sim_free(sim *m)
{
    free(m->in), free(m->acc), free(m->ready), free(m->held), free(m->busy_compute);
    free(m->busy_add), free(m->sent_s), free(m->done), free(m->computed), free(m->leaving);
}

/* The profile's rows the pass needs; 0, or -1 with err naming one. */
static int sim_rows(sim *m, const plan_profile *p, char *err, size_t err_len)
{
    const ring_schedule *s = m->s;
    int bwd = s->pass != RING_FORWARD, used[2] = {0, 0};
    for (int r = 0; r < s->P; r++)
        for (int st = 0; st < s->n_steps; st++) {
            const ring_step *x = ring_step_at(s, r, st);
            if (x->block >= 0 && x->compute) used[step_is_causal(s, r, x)] = 1;
        }
    for (int c = 0; c < 2; c++) { /* the rates of the masks some step computes */
        m->rate[c] =
            used[c] ? plan_profile_attention(p, bwd, s->d, c, s->layout.n, err, err_len) : 1;
        if (m->rate[c] < 0) return -1;
    }
    if (s->P > 1) {
        if (!(m->link[LINK_INTRA] = plan_profile_link(p, PROFILE_LINK_INTRA, err, err_len)))
            return -1;
        if (m->nodes > 1)
            if (!(m->link[LINK_INTER] = plan_profile_link(p, PROFILE_LINK_INTER, err, err_len)))
                return -1;
    }
    if (bwd && s->P > 1) {
        const profile_row *e = plan_profile_get(p, PROFILE_ELEMENTWISE, err, err_len);
        if (!e) return -1;
        m->add_gbps = e->gbps;
    }
    return 0;
}

static int sim_new(sim *m, const ring_schedule *s, int per_node, char *err, size_t err_len)
{
    size_t P = (size_t)s->P;
    memset(m, 0, sizeof *m);
    m->s = s;
    m->per_node = s->topo == TOPO_DOUBLE ? s->L : per_node < 1 || per_node > s->P ? s->P : per_node;
    m->nodes = (s->P + m->per_node - 1) / m->per_node;
    m->in = bu_calloc(P * P * sizeof(transfer), "the ring's price", err, err_len);
    m->acc = bu_calloc(P * P * sizeof(transfer), "the ring's price", err, err_len);
    m->ready = bu_calloc(P * sizeof(double), "the ring's price", err, err_len);
    m->held = bu_calloc(P * sizeof(double), "the ring's price", err, err_len);
    m->busy_compute = bu_calloc(P * sizeof(double), "the ring's price", err, err_len);
    m->busy_add = bu_calloc(P * sizeof(double), "the ring's price", err, err_len);
    m->sent_s = bu_calloc(P * sizeof(double), "the ring's price", err, err_len);
    m->done = bu_calloc(P * sizeof(double), "the ring's price", err, err_len);
    m->computed = bu_calloc(P * sizeof(int), "the ring's price", err, err_len);
    m->leaving = bu_calloc((size_t)m->nodes * 2 * sizeof(int), "the ring's price", err, err_len);
    if (!m->in || !m->acc || !m->ready || !m->held || !m->busy_compute || !m->busy_add ||
        !m->sent_s || !m->done || !m->computed || !m->leaving)
        return -1;
    for (size_t i = 0; i < P * P; i++)
        m->in[i] = m->acc[i] = (transfer){-1, -1, -1, 0, LINK_INTRA, 0};
    return 0;
}

int ring_pass_price(const ring_schedule *s, const plan_profile *p, int per_node,
                    ring_pass_time *out, char *err, size_t err_len)
{
    if (!s->pairs_counted) {
        snprintf(err, err_len, "a ring priced needs its pairs counted");
        return -1;
    }
    sim m;
    int status = sim_new(&m, s, per_node, err, err_len);
    if (status == 0) status = sim_rows(&m, p, err, err_len);
    for (int st = 0; status == 0 && st < s->n_steps; st++) {
        post_step(&m, st);
        time_posted(&m, m.in);
        compute_step(&m, st);
    }
    if (status == 0) {
        memset(out, 0, sizeof *out);
        out->rank = -1;
        for (int r = 0; r < s->P; r++) {
            double end = fmax(m.ready[r], m.done[r]);
            if (s->home_acc_from[r] >= 0) end = fmax(end, at(m.acc, s, r, r)->arrival);
            if (out->rank >= 0 && end <= out->total_s) continue;
            *out = (ring_pass_time){.total_s = end,
                                    .compute_s = m.busy_compute[r],
                                    .comm_s = m.sent_s[r],
                                    .add_s = m.busy_add[r],
                                    .exposed_s = end - m.busy_compute[r] - m.busy_add[r],
                                    .rank = r,
                                    .n_computed = m.computed[r]};
        }
    }
    sim_free(&m);
    return status;
}
