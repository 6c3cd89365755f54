/* train_memory.c: what the trainer says a rank needs against what it
 * allocates, on the ranks `burst run` starts. It is linked with the allocator
 * wrapped (-Wl,--wrap=malloc and the others, tests/local.mk), so every
 * allocation of the project's code (the static libraries), and only those,
 * goes through the counters below.
 *
 *   train_memory peak S.K=V ...   sets up `burst train` with these --set
 *       values and trains 2 steps; prints "rank R: state S peak P": the
 *       training state the memory report counts (trainer_memory_total) and
 *       the most bytes live at once, counted from just before the setup.
 *   train_memory fail S.K=V ...   sets up again and again, the k-th
 *       allocation of at least 4 KiB failing for k = 1, 2, ... until a setup
 *       makes fewer; each must end with EXIT_USAGE on every rank, without a
 *       crash. Prints "ok fail: N allocations refused".
 * Exit status 0, or 1 when a check failed. */
#include <malloc.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "src/train/trainer_internal.h"
#include "tests/lib/worker_util.h"
#include "util/exit_codes.h"

/* ------------------------------------------------------------------ counting */

void *__real_malloc(size_t bytes);
void *__real_calloc(size_t count, size_t bytes);
void *__real_realloc(void *p, size_t bytes);
void *__real_aligned_alloc(size_t align, size_t bytes);
void __real_free(void *p);
void *__wrap_malloc(size_t bytes);
void *__wrap_calloc(size_t count, size_t bytes);
void *__wrap_realloc(void *p, size_t bytes);
void *__wrap_aligned_alloc(size_t align, size_t bytes);
void __wrap_free(void *p);

enum { FAIL_MIN_BYTES = 4096 };

static atomic_llong live, peak;
static atomic_int fail_armed;     /* count the large allocations, fail the fail_at-th */
static atomic_llong large_seen, fail_at;

static void count(void *p, long long sign)
{
    if (!p) return;
    long long now = atomic_fetch_add(&live, sign * (long long)malloc_usable_size(p)) +
                    sign * (long long)malloc_usable_size(p);
    long long was = atomic_load(&peak);
    while (now > was && !atomic_compare_exchange_weak(&peak, &was, now)) {}
}

/* 1 when this allocation is the one to fail. */
static int refuse(size_t bytes)
{
    if (!atomic_load(&fail_armed) || bytes < FAIL_MIN_BYTES) return 0;
    return atomic_fetch_add(&large_seen, 1) + 1 == atomic_load(&fail_at);
}

void *__wrap_malloc(size_t bytes)
{
    void *p = refuse(bytes) ? NULL : __real_malloc(bytes);
    count(p, 1);
    return p;
}

void *__wrap_calloc(size_t n, size_t bytes)
{
    void *p = refuse(n * bytes) ? NULL : __real_calloc(n, bytes);
    count(p, 1);
    return p;
}

void *__wrap_aligned_alloc(size_t align, size_t bytes)
{
    void *p = refuse(bytes) ? NULL : __real_aligned_alloc(align, bytes);
    count(p, 1);
    return p;
}

void *__wrap_realloc(void *old, size_t bytes)
{
    size_t was = old ? malloc_usable_size(old) : 0;
    void *p = __real_realloc(old, bytes);
    if (p || bytes == 0) atomic_fetch_sub(&live, (long long)was);
    count(p, 1);
    return p;
}

void __wrap_free(void *p)
{
    count(p, -1);
    __real_free(p);
}

/* ------------------------------------------------------------------ runs */

/* A trainer over the world with the default configuration and these --set
 * values; 0 or -1 (reported). */
static int configure(trainer *t, int n_sets, char **sets)
{
    memset(t, 0, sizeof *t);
    train_config_default(&t->cfg);
    t->world = world;
    t->opts.inject_step = -1;
    char err[512];
    for (int i = 0; i < n_sets; i++)
        if (train_config_set(&t->cfg, sets[i], err, sizeof err) != 0) {
            fprintf(stderr, "rank %d: --set %s: %s\n", rank, sets[i], err);
            return -1;
        }
    return 0;
}

static int run_peak(int n_sets, char **sets)
{
    trainer t;
    if (configure(&t, n_sets, sets) != 0) return WORKER_USAGE;
    char err[512];
    long long before = atomic_load(&live);
    atomic_store(&peak, before);
    int status = trainer_setup(&t, err, sizeof err);
    EXPECT(status == 0, "setup: status %d: %s", status, err);
    for (int64_t step = 1; status == 0 && step <= 2; step++) {
        trainer_step_result res;
        status = trainer_step(&t, step, &res);
        EXPECT(status == 0, "step %lld: status %d", (long long)step, status);
    }
    printf("rank %d: state %zu peak %lld\n", rank, trainer_memory_total(&t.mem),
           atomic_load(&peak) - before);
    trainer_free_parts(&t);
    return 0;
}

static int run_fail(int n_sets, char **sets)
{
    long long refused = 0;
    for (long long k = 1;; k++) {
        trainer t;
        if (configure(&t, n_sets, sets) != 0) return WORKER_USAGE;
        char err[512];
        atomic_store(&large_seen, 0);
        atomic_store(&fail_at, k);
        atomic_store(&fail_armed, 1);
        int status = trainer_setup(&t, err, sizeof err);
        atomic_store(&fail_armed, 0);
        int64_t hit = atomic_load(&large_seen) >= k; /* on any rank: all go on together */
        must(bt_allreduce(bt_world_comm(world), &hit, 1, BT_I64, BT_MAX), "allreduce");
        trainer_free_parts(&t);
        if (!hit) {
            EXPECT(status == 0, "setup without a refused allocation: status %d: %s", status, err);
            break;
        }
        EXPECT(status == EXIT_USAGE, "allocation %lld refused: status %d (%s)", k, status, err);
        if (status != EXIT_USAGE) break;
        refused++;
    }
    if (rank == 0) printf("ok fail: %lld allocations refused\n", refused);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2 || (strcmp(argv[1], "peak") != 0 && strcmp(argv[1], "fail") != 0)) {
        fprintf(stderr, "usage: train_memory peak|fail [S.K=V ...]\n");
        return WORKER_USAGE;
    }
    worker_init("train_memory");
    int status = strcmp(argv[1], "peak") == 0 ? run_peak(argc - 2, argv + 2)
                                              : run_fail(argc - 2, argv + 2);
    fflush(stdout);
    int64_t total_failures = worker_finish();
    return status ? status : total_failures ? WORKER_FAILED : 0;
}
