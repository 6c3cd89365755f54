/* simt_runtime.cc: the SIMT emulator's launch loop and block scheduler, the
 * CUDA threads' fibers, __syncthreads, and the error path (simt_runtime.h).
 *
 * Per block: every thread starts runnable; the scheduler sweeps the threads in
 * the schedule's order (index order, reverse, or a fresh random order per
 * sweep) and resumes each runnable one, which runs until it blocks, exits or,
 * under a random schedule, is preempted before a shared-memory access or a
 * warp collective. Blocks run one after another, in x, y, z order or random.
 * A barrier or a warp collective is released by the last thread to arrive,
 * which then keeps running; the others run at the next sweep. A sweep that
 * finds nothing runnable while some threads still wait is a deadlock,
 * reported with what each waiting thread waits for. */
#include "emu/simt/simt_runtime.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <atomic>
#include <mutex>

#include "emu/simt/simt_internal.h"
#include "emu/simt/simt_shared.h"

namespace bk_emu
{

__thread launch_state *t_launch;
__thread const uint3 *t_thread_idx, *t_block_idx;
__thread uint3 t_block_dim, t_grid_dim;

static int g_fatal = 1;
static __thread char t_last_error[1024];
static __thread stats t_stats;

/* The fibers of this OS thread, kept from launch to launch (creating a fiber
 * costs a system call or two); dropped after an error, since an abandoned
 * fiber's stack cannot be reused safely. */
struct pool {
    fiber main;
    thread_state *threads;
    int n;
};
static __thread pool t_pool;

void set_fatal(int fatal)
{
    g_fatal = fatal;
}

/* ---------------------------------------------------------------- schedule */

enum schedule_kind { SCHEDULE_FORWARD, SCHEDULE_REVERSE, SCHEDULE_RANDOM };
static int g_schedule = SCHEDULE_FORWARD;
static uint64_t g_seed;                         /* of SCHEDULE_RANDOM */
static __thread unsigned long long t_launch_no; /* launches on this OS thread */

/* One in PREEMPT_ONE_IN shared-memory accesses and warp collectives of a
 * random schedule hands the block back to the scheduler first: often enough
 * that a read-modify-write of a few accesses is interleaved, rarely enough
 * that a thread also runs stretches alone. */
enum { PREEMPT_ONE_IN = 4 };

int set_schedule(const char *spec)
{
    if (strcmp(spec, "forward") == 0 || strcmp(spec, "reverse") == 0) {
        g_schedule = spec[0] == 'f' ? SCHEDULE_FORWARD : SCHEDULE_REVERSE;
        g_shared_watch &= ~WATCH_SCHEDULE;
        return 0;
    }
    const char *digits = strncmp(spec, "random:", 7) == 0 ? spec + 7 : NULL;
    if (digits == NULL || *digits < '0' || *digits > '9') return -1;
    char *end;
    errno = 0;
    unsigned long long seed = strtoull(digits, &end, 10);
    if (*end != '\0' || errno != 0) return -1;
    g_seed = seed;
    g_schedule = SCHEDULE_RANDOM;
    g_shared_watch |= WATCH_SCHEDULE;
    return 0;
}

/* splitmix64: a launch's generator seeded from the seed and the launch's
 * number, so that every launch draws differently and each is reproducible. */
static uint64_t mix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static uint64_t draw(launch_state *L)
{
    L->rng = mix(L->rng);
    return L->rng;
}

/* A number in [0, n), n > 0 (the bias of the modulo is immaterial here). */
static uint32_t draw_below(launch_state *L, uint32_t n)
{
    return (uint32_t)(draw(L) % n);
}

/* Under a random schedule, sometimes hands the running thread t back to the
 * scheduler (still runnable), so that other threads run before its next
 * access; called before each shared-memory access and warp collective. */
void schedule_point(thread_state *t)
{
    launch_state *L = t_launch;
    if (L->random && draw_below(L, PREEMPT_ONE_IN) == 0) scheduler_yield(t);
}

/* The order of the sweep in L->sweep: thread indices 0 .. n_threads - 1 in
 * the schedule's order (a fresh shuffle per sweep when random). */
static void order_sweep(launch_state *L)
{
    int n = L->n_threads;
    if (!L->swept) /* once a launch: a shuffle of any order is as random */
        for (int k = 0; k < n; k++)
            L->sweep[k] = (int16_t)(g_schedule == SCHEDULE_REVERSE ? n - 1 - k : k);
    L->swept = 1;
    if (!L->random) return;
    for (int k = n - 1; k > 0; k--) { /* Fisher-Yates */
        int j = (int)draw_below(L, (uint32_t)k + 1);
        int16_t tmp = L->sweep[k];
        L->sweep[k] = L->sweep[j], L->sweep[j] = tmp;
    }
}

static uint64_t gcd(uint64_t a, uint64_t b)
{
    while (b != 0) {
        uint64_t r = a % b;
        a = b, b = r;
    }
    return a;
}

/* The blocks' order: block k of the run is the grid's linear block
 * (first + k * stride) mod n, which visits every block once when stride and
 * n are coprime; 0 and 1 (x, y, z order) unless random. A grid may have up to
 * 2^31 * 2^32 blocks, too many to shuffle a list of. */
static void order_blocks(launch_state *L, uint64_t n, uint64_t *first, uint64_t *stride)
{
    *first = 0, *stride = 1;
    if (!L->random || n < 2) return;
    *first = draw(L) % n;
    do *stride = 1 + draw(L) % (n - 1);
    while (gcd(*stride, n) != 1);
}

/* The process whose first runtime call initialised the emulated runtime (0:
 * none yet); a forked child inherits it, which is how it knows it is one. */
static std::atomic<pid_t> g_runtime_owner{0};

int runtime_owned(char *why, size_t len)
{
    pid_t me = getpid(), owner = 0;
    if (g_runtime_owner.compare_exchange_strong(owner, me) || owner == me) return 1;
    snprintf(why, len,
             "initialization error: the runtime was initialised in process %ld, and process %ld "
             "is a child forked from it after that",
             (long)owner, (long)me);
    return 0;
}

/* Shared memory per block, from the CUDA C++ Programming Guide's table of
 * technical specifications per compute capability ("maximum amount of shared
 * memory per thread block"): 48 KiB without opting in (every architecture),
 * 163 KiB on compute capability 8.0 (A100) and 227 KiB on 9.0 (H100, H200)
 * for a kernel whose cudaFuncAttributeMaxDynamicSharedMemorySize was raised. */
enum {
    DEFAULT_DYN_SMEM = 48 * 1024,
    SM80_MAX_BLOCK_SMEM = 163 * 1024,
    SM90_MAX_BLOCK_SMEM = 227 * 1024,
    MAX_RAISED = 64
};
static std::atomic<int> g_arch{0}; /* 0: not chosen yet (BK_EMU_ARCH, else 80) */

int set_arch(int sm)
{
    if (sm != 80 && sm != 90) return -1;
    g_arch = sm;
    return 0;
}

int arch(void)
{
    if (g_arch == 0) {
        const char *env = getenv("BK_EMU_ARCH");
        g_arch = env != NULL && strcmp(env, "sm_90") == 0 ? 90 : 80;
    }
    return g_arch;
}

size_t max_block_smem(void)
{
    return arch() == 90 ? SM90_MAX_BLOCK_SMEM : SM80_MAX_BLOCK_SMEM;
}

/* The kernels whose dynamic shared memory limit was raised, with the limit
 * (cudaFuncSetAttribute's record; a handful of kernels, so a short list). */
static struct {
    std::mutex lock;
    const void *kernel[MAX_RAISED];
    size_t bytes[MAX_RAISED];
    int n;
} g_raised;

int func_set_max_dynamic_smem(const void *kernel, size_t bytes)
{
    if (kernel == NULL || bytes > max_block_smem()) return -1;
    std::lock_guard<std::mutex> hold(g_raised.lock);
    int i = 0;
    while (i < g_raised.n && g_raised.kernel[i] != kernel) i++;
    if (i == MAX_RAISED) return -1;
    if (i == g_raised.n) g_raised.n++;
    g_raised.kernel[i] = kernel, g_raised.bytes[i] = bytes;
    return 0;
}

static size_t max_dynamic_smem(const void *kernel)
{
    std::lock_guard<std::mutex> hold(g_raised.lock);
    for (int i = 0; i < g_raised.n; i++)
        if (g_raised.kernel[i] == kernel) return g_raised.bytes[i];
    return DEFAULT_DYN_SMEM;
}

const char *last_error(void)
{
    return t_last_error;
}

void note_error(const char *msg)
{
    snprintf(t_last_error, sizeof t_last_error, "bk_emu: %s", msg);
}

int refuse_launch(const char *kernel, const char *detail)
{
    snprintf(t_last_error, sizeof t_last_error, "bk_emu: kernel %s: %s", kernel, detail);
    if (g_fatal) {
        fprintf(stderr, "%s\n", t_last_error);
        abort();
    }
    return -1;
}

stats get_stats(void)
{
    return t_stats;
}

void reset_stats(void)
{
    memset(&t_stats, 0, sizeof t_stats);
}

const char *collective_name(int kind)
{
    static const char *names[C_N_KINDS] = {"__shfl_sync",
                                           "__shfl_up_sync",
                                           "__shfl_down_sync",
                                           "__shfl_xor_sync",
                                           "vote (__ballot_sync, __any_sync, __all_sync)",
                                           "__syncwarp",
                                           "mma.sync",
                                           "ldmatrix"};
    return kind >= 0 && kind < C_N_KINDS ? names[kind] : "?";
}

/* ---------------------------------------------------------------- errors */

static int where_prefix(launch_state *L, char *buf, size_t len)
{
    int n = snprintf(buf, len, "bk_emu: kernel %s block (%u,%u,%u)", L->name, L->block_idx.x,
                     L->block_idx.y, L->block_idx.z);
    if (L->current)
        n += snprintf(buf + n, len - (size_t)n, " thread (%u,%u,%u)", L->current->tid.x,
                      L->current->tid.y, L->current->tid.z);
    if (L->random)
        n += snprintf(buf + n, len - (size_t)n, " [schedule random:%llu, launch %llu]",
                      (unsigned long long)g_seed, L->launch_no);
    n += snprintf(buf + n, len - (size_t)n, ": ");
    return n;
}

static void vfail(launch_state *L, const char *fmt, va_list ap)
{
    if (L->failed) return; /* keep the first error */
    int n = where_prefix(L, L->msg, sizeof L->msg);
    vsnprintf(L->msg + n, sizeof L->msg - (size_t)n, fmt, ap);
    L->failed = 1;
}

/* An error found by the scheduler (no thread running). */
static void fail_block(launch_state *L, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void fail_block(launch_state *L, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vfail(L, fmt, ap);
    va_end(ap);
}

void fail_thread(const char *fmt, ...)
{
    launch_state *L = t_launch;
    va_list ap;
    va_start(ap, fmt);
    vfail(L, fmt, ap);
    va_end(ap);
    thread_state *t = L->current;
    fiber_switch(&t->f, &t_pool.main); /* never resumed */
    abort();
}

/* ---------------------------------------------------------------- fibers */

static void thread_exit(launch_state *L, thread_state *t);

/* The life of a CUDA thread's fiber: run the kernel body for the current block,
 * then hand back to the scheduler, which resumes it for the next block. */
static void thread_main(void *arg)
{
    thread_state *t = static_cast<thread_state *>(arg);
    for (;;) {
        launch_state *L = t_launch;
        L->body(L->ctx);
        thread_exit(L, t);
        fiber_switch(&t->f, &t_pool.main);
    }
}

static void pool_drop(void)
{
    for (int i = 0; i < t_pool.n; i++) {
        fiber_destroy(&t_pool.threads[i].f);
        free(t_pool.threads[i].copies);
    }
    free(t_pool.threads);
    t_pool.threads = NULL;
    t_pool.n = 0;
}

/* At least n thread slots with fibers; 0 on success. The slots are allocated
 * once at their maximum (1024) and never move: a suspended fiber keeps
 * pointers to its slot. */
static int pool_reserve(int n)
{
    if (t_pool.n >= n) return 0;
    if (t_pool.threads == NULL) {
        fiber_main_init(&t_pool.main);
        t_pool.threads = static_cast<thread_state *>(calloc(1024, sizeof(thread_state)));
        if (t_pool.threads == NULL) return -1;
    }
    for (int i = t_pool.n; i < n; i++) {
        thread_state *t = &t_pool.threads[i];
        memset(t, 0, sizeof *t);
        if (fiber_create(&t->f, fiber_default_stack(), thread_main, t) != 0) return -1;
        t_pool.n = i + 1;
    }
    return 0;
}

/* ---------------------------------------------------------------- barriers */

static void release_barrier(launch_state *L)
{
    const char *file = NULL;
    int line = 0, first = -1;
    for (int i = 0; i < L->n_threads; i++) {
        thread_state *t = &L->threads[i];
        if (t->state != T_BARRIER) continue;
        if (first < 0) {
            first = i;
            file = t->bar_file;
            line = t->bar_line;
        } else if (t->bar_line != line || strcmp(t->bar_file, file) != 0) {
            fail_thread("threads wait at different __syncthreads: thread %d at %s:%d, thread %d at "
                        "%s:%d",
                        first, file, line, i, t->bar_file, t->bar_line);
        }
    }
    for (int i = 0; i < L->n_threads; i++)
        if (L->threads[i].state == T_BARRIER) L->threads[i].state = T_RUN;
    L->n_barrier = 0;
    racecheck_barrier(L, file, line);
}

/* Index of a thread that has exited, or -1. */
static int first_exited(launch_state *L)
{
    for (int i = 0; i < L->n_threads; i++)
        if (L->threads[i].state == T_EXITED) return i;
    return -1;
}

void syncthreads(const char *file, int line)
{
    launch_state *L = t_launch;
    thread_state *t = L->current;
    t->state = T_BARRIER;
    t->bar_file = file;
    t->bar_line = line;
    L->n_barrier++;
    if (L->n_barrier == L->n_live) {
        int ex = first_exited(L);
        if (ex >= 0)
            fail_thread("__syncthreads at %s:%d is not reached by every thread of the block: "
                        "thread %d exited before it",
                        file, line, ex);
        release_barrier(L);
        t->state = T_RUN;
        return;
    }
    scheduler_yield(t);
}

void scheduler_yield(thread_state *t)
{
    t_stats.switches++;
    fiber_switch(&t->f, &t_pool.main);
}

/* ---------------------------------------------------------------- exits */

static void thread_exit(launch_state *L, thread_state *t)
{
    copies_flush(t);
    t->state = T_EXITED;
    L->n_live--;
    /* a lane waiting in a collective whose mask names this lane now waits forever */
    for (int l = 0; l < 32; l++) {
        thread_state *o = warp_lane(t->warp, l);
        if (o->state == T_WARP && ((o->c.mask >> t->lane) & 1u))
            fail_thread("lane %d exits while lane %d waits in %s at %s:%d with mask 0x%08x naming "
                        "it",
                        t->lane, l, collective_name(o->c.kind), o->c.file, o->c.line, o->c.mask);
    }
    if (L->n_barrier > 0 && L->n_barrier == L->n_live) {
        thread_state *w = NULL;
        for (int i = 0; i < L->n_threads && !w; i++)
            if (L->threads[i].state == T_BARRIER) w = &L->threads[i];
        fail_thread("exits without reaching the __syncthreads at %s:%d where %d other threads wait",
                    w->bar_file, w->bar_line, L->n_barrier);
    }
}

/* ---------------------------------------------------------------- scheduler */

/* Nothing is runnable yet some threads wait: say who waits for what. */
static void report_deadlock(launch_state *L)
{
    char detail[640];
    size_t n = 0;
    int shown = 0, bar = 0, warp = 0, exited = 0;
    for (int i = 0; i < L->n_threads; i++) {
        thread_state *t = &L->threads[i];
        bar += t->state == T_BARRIER;
        warp += t->state == T_WARP;
        exited += t->state == T_EXITED;
        if (shown >= 4 || (t->state != T_BARRIER && t->state != T_WARP)) continue;
        if (t->state == T_BARRIER)
            n += (size_t)snprintf(detail + n, sizeof detail - n,
                                  "; thread %d in __syncthreads at %s:%d", i, t->bar_file,
                                  t->bar_line);
        else
            n += (size_t)snprintf(detail + n, sizeof detail - n,
                                  "; thread %d in %s at %s:%d mask 0x%08x", i,
                                  collective_name(t->c.kind), t->c.file, t->c.line, t->c.mask);
        shown++;
        if (n >= sizeof detail) n = sizeof detail - 1;
    }
    detail[n] = '\0';
    fail_block(L, "deadlock: %d threads wait in __syncthreads, %d in warp collectives, %d exited%s",
               bar, warp, exited, detail);
}

static uint3 thread_coord(const dim3 &b, int i)
{
    uint3 u;
    u.x = (unsigned)i % b.x;
    u.y = ((unsigned)i / b.x) % b.y;
    u.z = (unsigned)i / (b.x * b.y);
    return u;
}

static void block_begin(launch_state *L)
{
    for (int i = 0; i < L->n_slots; i++) {
        thread_state *t = &L->threads[i];
        t->index = i;
        t->lane = i % 32;
        t->warp = i / 32;
        t->tid = thread_coord(L->block, i);
        t->state = i < L->n_threads ? T_RUN : T_ABSENT;
        t->n_copies = 0;
        t->next_group = 0;
    }
    L->n_live = L->n_threads;
    L->n_barrier = 0;
    L->current = NULL;
    shared_block_begin(L);
}

/* Runs one block to completion; 0 on success, -1 when L->failed. */
static int run_block(launch_state *L)
{
    block_begin(L);
    t_block_idx = &L->block_idx;
    for (;;) {
        int ran = 0;
        order_sweep(L);
        for (int k = 0; k < L->n_threads; k++) {
            thread_state *t = &L->threads[L->sweep[k]];
            if (t->state != T_RUN) continue;
            L->current = t;
            t_thread_idx = &t->tid;
            t_stats.switches++;
            fiber_switch(&t_pool.main, &t->f);
            L->current = NULL;
            ran = 1;
            if (L->failed) return -1;
        }
        if (L->n_live == 0) break;
        if (!ran) {
            report_deadlock(L);
            return -1;
        }
    }
    shared_block_end(L);
    return 0;
}

/* What is wrong with a launch's configuration as CUDA states its limits, in
 * buf (len bytes); NULL when nothing is. */
static const char *config_problem(const void *kernel, dim3 g, dim3 b, size_t dyn_smem, char *buf,
                                  size_t len)
{
    long long nt = (long long)b.x * b.y * b.z;
    if (b.x == 0 || b.y == 0 || b.z == 0 || g.x == 0 || g.y == 0 || g.z == 0)
        snprintf(buf, len, "launch with a zero grid or block dimension");
    else if (nt > 1024 || b.x > 1024 || b.y > 1024 || b.z > 64)
        snprintf(buf, len,
                 "block of %u x %u x %u threads exceeds CUDA's limits (1024 threads, z <= 64)", b.x,
                 b.y, b.z);
    else if (g.x > 2147483647u || g.y > 65535 || g.z > 65535)
        snprintf(buf, len, "grid of %u x %u x %u blocks exceeds CUDA's limits", g.x, g.y, g.z);
    else if (dyn_smem > DEFAULT_DYN_SMEM && dyn_smem > max_dynamic_smem(kernel))
        snprintf(buf, len,
                 "%zu bytes of dynamic shared memory, over the 48 KiB a kernel may have unless "
                 "cudaFuncSetAttribute(MaxDynamicSharedMemorySize) raised its limit (to %zu)",
                 dyn_smem, max_dynamic_smem(kernel));
    else
        return NULL;
    return buf;
}

static int check_config(launch_state *L)
{
    char why[300];
    const char *problem =
        config_problem(L->kernel, L->grid, L->block, L->dyn_smem, why, sizeof why);
    if (problem) fail_block(L, "%s", problem);
    return L->failed ? -1 : 0;
}

int check_launch_config(const char *name, const void *kernel, dim3 grid, dim3 block,
                        size_t dyn_smem)
{
    char why[300];
    const char *problem = config_problem(kernel, grid, block, dyn_smem, why, sizeof why);
    return problem ? refuse_launch(name, problem) : 0;
}

static int finish(launch_state *L, int rc)
{
    if (rc == 0) return 0;
    snprintf(t_last_error, sizeof t_last_error, "%s", L->msg);
    shared_block_end(L);
    pool_drop();
    if (g_fatal) {
        fprintf(stderr, "%s\n", L->msg);
        abort();
    }
    return -1;
}

static std::atomic<int> g_edge_blocks{0};

void set_edge_blocks(int on)
{
    g_edge_blocks = on;
}

/* Runs every block of the grid, in the schedule's order (only the first and
 * the last under set_edge_blocks); 0 on success. */
static int run_grid(launch_state *L)
{
    const dim3 &g = L->grid;
    uint64_t n = (uint64_t)g.x * g.y * g.z, first, stride;
    order_blocks(L, n, &first, &stride);
    uint64_t b = first;
    int edges = g_edge_blocks.load();
    for (uint64_t k = 0; k < n; k++, b = (b + stride) % n) {
        if (edges && b != 0 && b != n - 1) continue;
        L->block_idx.x = (unsigned)(b % g.x);
        L->block_idx.y = (unsigned)(b / g.x % g.y);
        L->block_idx.z = (unsigned)(b / g.x / g.y);
        t_stats.blocks++;
        if (run_block(L) != 0) return -1;
    }
    return 0;
}

/* The emulator's settings from the environment, read once. */
static void read_settings(void)
{
    const char *schedule = getenv("BK_EMU_SCHEDULE");
    if (schedule != NULL && set_schedule(schedule) != 0) {
        fprintf(stderr,
                "bk_emu: BK_EMU_SCHEDULE=%s: expected forward, reverse or random:SEED "
                "(SEED a decimal number)\n",
                schedule);
        abort();
    }
    const char *race = getenv("BK_EMU_RACECHECK"); /* "0": set_racecheck(0) */
    if (race != NULL && strcmp(race, "0") == 0) set_racecheck(0);
}

static void read_environment(void)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, read_settings);
}

int random_schedule(void)
{
    read_environment();
    return g_schedule == SCHEDULE_RANDOM;
}

unsigned long long random_schedule_seed(void)
{
    read_environment();
    return g_seed;
}

int launch_raw(const char *name, const void *kernel, dim3 grid, dim3 block, size_t dyn_smem,
               void (*body)(void *), void *ctx)
{
    launch_state *L = static_cast<launch_state *>(calloc(1, sizeof(launch_state)));
    if (L == NULL) return -1;
    L->name = name;
    L->kernel = kernel;
    L->grid = grid;
    L->block = block;
    L->dyn_smem = dyn_smem;
    L->body = body;
    L->ctx = ctx;
    read_environment();
    L->racecheck = (g_shared_watch & WATCH_RACES) != 0;
    L->launch_no = ++t_launch_no;
    L->random = g_schedule == SCHEDULE_RANDOM;
    L->rng = mix(g_seed ^ mix(L->launch_no));
    launch_state *outer = t_launch;
    if (outer != NULL) {
        fprintf(stderr, "bk_emu: kernel %s launched from inside kernel %s\n", name, outer->name);
        abort();
    }
    t_launch = L;
    t_stats.launches++;
    int rc = check_config(L);
    if (rc == 0) {
        L->n_threads = (int)(block.x * block.y * block.z);
        L->n_slots = (L->n_threads + 31) / 32 * 32;
        if (pool_reserve(L->n_slots) != 0) {
            fail_block(L, "cannot create %d fibers (out of memory)", L->n_slots);
            rc = -1;
        }
        L->threads = t_pool.threads;
    }
    t_block_dim.x = block.x, t_block_dim.y = block.y, t_block_dim.z = block.z;
    t_grid_dim.x = grid.x, t_grid_dim.y = grid.y, t_grid_dim.z = grid.z;
    if (rc == 0) rc = run_grid(L);
    rc = finish(L, rc);
    t_launch = NULL;
    for (int w = 0; w < MAX_WARPS; w++) free(L->syncs[w].pair);
    free(L);
    return rc;
}

} // namespace bk_emu
