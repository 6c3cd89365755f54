/* test_out_of_memory.c: memory that cannot be had is an error naming the
 * size, not a crash (util/alloc.h's promise), in the CPU attention kernels
 * (kernels/cpu/attention_{fwd,bwd}.c), the command-line attention problem and
 * the ring planner (src/attn/attn_options.c, ring_plan.c) and a rank's
 * messages to itself (transport/backend_self.c).
 *
 * The program is linked with the allocator wrapped (-Wl,--wrap=malloc and
 * the others, tests/local.mk): once armed, the k-th allocation of at least
 * `min` bytes made by the project's code fails. Each call is repeated with
 * k = 1, 2, ... until it makes fewer than k: every run before must fail with
 * the out-of-memory message, and the sanitizer builds see no leak. */
#include <check.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/attention.h"
#include "src/attn/attn_options.h"
#include "tests/lib/arrays.h"
#include "tests/lib/check_main.h"
#include "transport/transport.h"

/* ------------------------------------------------------------------ the wrapped allocator */

void *__real_malloc(size_t bytes);
void *__real_calloc(size_t count, size_t bytes);
void *__real_realloc(void *p, size_t bytes);
void *__real_aligned_alloc(size_t align, size_t bytes);
void *__wrap_malloc(size_t bytes);
void *__wrap_calloc(size_t count, size_t bytes);
void *__wrap_realloc(void *p, size_t bytes);
void *__wrap_aligned_alloc(size_t align, size_t bytes);

static atomic_long armed_min; /* 0: every allocation succeeds */
static atomic_long seen, fail_at;

/* 1 when this allocation is the one to fail. */
static int refuse(size_t bytes)
{
    long min = atomic_load(&armed_min);
    if (min == 0 || bytes < (size_t)min) return 0;
    return atomic_fetch_add(&seen, 1) + 1 == atomic_load(&fail_at);
}

void *__wrap_malloc(size_t bytes) { return refuse(bytes) ? NULL : __real_malloc(bytes); }
void *__wrap_calloc(size_t n, size_t bytes)
{
    return refuse(n * bytes) ? NULL : __real_calloc(n, bytes);
}
void *__wrap_realloc(void *p, size_t bytes)
{
    return refuse(bytes) ? NULL : __real_realloc(p, bytes);
}
void *__wrap_aligned_alloc(size_t align, size_t bytes)
{
    return refuse(bytes) ? NULL : __real_aligned_alloc(align, bytes);
}

/* The k-th allocation of at least min bytes from now on fails. */
static void arm(long min, long k)
{
    atomic_store(&seen, 0);
    atomic_store(&fail_at, k);
    atomic_store(&armed_min, min);
}

/* Disarms; returns how many allocations counted. */
static long disarm(void)
{
    atomic_store(&armed_min, 0);
    return atomic_load(&seen);
}

/* util/alloc.h's message, perhaps after a prefix ("rank 0: ") */
static int names_the_size(const char *msg)
{
    return strstr(msg, "out of memory: cannot allocate ") && strstr(msg, " bytes (");
}

/* ------------------------------------------------------------------ kernels */

enum { N = 300, HQ = 2, HKV = 1, D = 16 };

typedef struct {
    bk_queue q;
    bk_attn_geom g;
    float *Q, *K, *V, *O, *lse, *dO, *delta, *dQ, *dK, *dV;
    int64_t *pos;
} attn_case;

static attn_case attn_case_make(void)
{
    attn_case c;
    c.q = bk_host_queue();
    c.q.n_threads = 2; /* two threads: private dQ copies and per-thread scratch */
    uint64_t rng = 7;
    c.Q = test_rand_f(&rng, N * HQ * D, -1, 1);
    c.K = test_rand_f(&rng, N * HKV * D, -1, 1);
    c.V = test_rand_f(&rng, N * HKV * D, -1, 1);
    c.dO = test_rand_f(&rng, N * HQ * D, -1, 1);
    c.O = test_zeros_f(N * HQ * D);
    c.lse = test_zeros_f(N * HQ);
    c.delta = test_zeros_f(N * HQ);
    c.dQ = test_zeros_f(N * HQ * D);
    c.dK = test_zeros_f(N * HKV * D);
    c.dV = test_zeros_f(N * HKV * D);
    c.pos = test_alloc(N, sizeof(int64_t));
    for (int64_t i = 0; i < N; i++) c.pos[i] = i;
    c.g = (bk_attn_geom){.n_q = N, .n_kv = N, .h_q = HQ, .h_kv = HKV, .d = D, .scale = 0.25f,
                         .q_pos = c.pos, .kv_pos = c.pos, .mask = bk_attn_mask_causal()};
    return c;
}

static void attn_case_free(attn_case *c)
{
    free(c->Q), free(c->K), free(c->V), free(c->O), free(c->lse), free(c->dO);
    free(c->delta), free(c->dQ), free(c->dK), free(c->dV), free(c->pos);
}

static bk_status run_fwd(attn_case *c)
{
    return bk_attn_fwd(&c->q, &c->g, c->Q, c->K, c->V, c->O, c->lse, NULL);
}

static bk_status run_bwd(attn_case *c)
{
    return bk_attn_bwd(&c->q, &c->g, c->Q, c->K, c->V, c->dO, c->lse, c->delta, c->dQ, c->dK,
                       c->dV, NULL);
}

/* Fails each allocation of the call in turn: BK_ERR_NOMEM with the message,
 * until the call makes fewer; returns how many were refused. */
static int refuse_each(attn_case *c, bk_status (*call)(attn_case *), const char *name)
{
    int refused = 0;
    for (long k = 1;; k++) {
        arm(1, k);
        bk_status st = call(c);
        long made = disarm();
        if (made < k) {
            ck_assert_msg(st == BK_OK, "%s with every allocation had: %s", name,
                          bk_status_name(st));
            return refused;
        }
        ck_assert_msg(st == BK_ERR_NOMEM && names_the_size(bk_kernel_error()),
                      "%s, allocation %ld refused: %s, \"%s\"", name, k, bk_status_name(st),
                      bk_kernel_error());
        refused++;
    }
}

START_TEST(attention_kernels_report_memory_they_cannot_have)
{
    attn_case c = attn_case_make();
    ck_assert_int_eq(bk_attn_fwd_init(&c.q, N, HQ, D, c.O, c.lse), BK_OK);
    int fwd = refuse_each(&c, run_fwd, "bk_attn_fwd");
    ck_assert_int_eq(bk_attn_delta(&c.q, N, HQ, D, c.dO, c.O, c.delta), BK_OK);
    int bwd = refuse_each(&c, run_bwd, "bk_attn_bwd");
    /* fwd: tile ranges and each thread's scratch; bwd: also the slices and dQ copies */
    ck_assert_msg(fwd >= 4 && bwd >= 6, "only %d (forward), %d (backward) refused", fwd, bwd);
    attn_case_free(&c);
}
END_TEST

/* ------------------------------------------------------------------ attn */

START_TEST(ring_planner_reports_memory_it_cannot_have)
{
    static const char *const masks[] = {"document", "sparse"};
    int refused = 0;
    for (int m = 0; m < 2; m++)
        for (long k = 1;; k++) {
            attn_options o;
            attn_options_default(&o);
            o.seq = 4096, o.ranks = 4, o.nodes = 2, o.doc_len = 1000, o.sparse_block = 256;
            snprintf(o.mask, sizeof o.mask, "%s", masks[m]);
            ring_plan_config cfg;
            char err[256] = "";
            arm(1, k);
            ring_schedule *s = NULL;
            int built = attn_options_build(&o, &cfg, err, sizeof err) == 0;
            if (built) s = ring_plan(&cfg, RING_BWD_KV_SIDE, err, sizeof err);
            long made = disarm();
            ring_schedule_free(s);
            attn_options_free(&o);
            if (made < k) {
                ck_assert_msg(s != NULL, "%s mask, every allocation had: %s", masks[m], err);
                break;
            }
            ck_assert_msg(s == NULL && names_the_size(err), "%s mask, allocation %ld refused: %s",
                          masks[m], k, err);
            refused++;
        }
    /* the mask's buffer (each mask), the schedule and its 3 arrays, 4 scratch arrays */
    ck_assert_msg(refused >= 2 * 9, "only %d refused", refused);
}
END_TEST

/* ------------------------------------------------------------------ transport */

START_TEST(self_send_reports_memory_it_cannot_have)
{
    bt_world *w = NULL;
    char err[256];
    ck_assert_msg(bt_world_init(NULL, &w, err, sizeof err) == BT_OK, "%s", err);
    ck_assert_int_eq(bt_world_size(w), 1);
    enum { BYTES = 1 << 20 };
    char *buf = test_alloc(BYTES, 1);
    bt_request *req = NULL;
    /* no receive posted: the message is copied aside, and that copy fails */
    arm(BYTES, 1);
    bt_status st = bt_isend(bt_world_comm(w), 0, 0, buf, BYTES, &req);
    long made = disarm();
    ck_assert_int_eq(made, 1);
    ck_assert_msg(st == BT_ERR_SYS && names_the_size(bt_world_error(w)) &&
                      strstr(bt_world_error(w), "1048576 bytes"),
                  "%s: \"%s\"", bt_status_name(st), bt_world_error(w));
    bt_world_finalize(w); /* the world failed: it says so, and is freed */
    free(buf);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("out_of_memory");
    check_add_tests(check_tcase(s, "out_of_memory", 120),
                    attention_kernels_report_memory_they_cannot_have,
                    ring_planner_reports_memory_it_cannot_have,
                    self_send_reports_memory_it_cannot_have);
    return check_run(s);
}
