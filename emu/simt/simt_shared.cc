/* simt_shared.cc: the shared memory of the block the SIMT emulator runs
 * (simt_shared.h): arrays allocated at their first declaration in a block,
 * found again by the other threads through the declaration's address, filled
 * with 0xff bytes, freed at the end of the block; CUDA's limits on their size;
 * the out-of-bounds report; and the race detector.
 *
 * The race detector (as compute-sanitizer's racecheck) keeps a shadow cell per
 * byte of each array: the thread that last wrote it and in which barrier epoch
 * (the epoch advances when a __syncthreads is released), and up to two
 * threads that read it in the current epoch. Two accesses of one byte by
 * different threads race when at least one is a write and nothing orders
 * them: no __syncthreads between them (they fall in the same epoch), and, for
 * two lanes of one warp, no __syncwarp naming both between them. Only
 * __syncwarp (bar.warp.sync) orders memory among lanes: the PTX memory model
 * gives shfl.sync, vote.sync, ldmatrix and mma no memory ordering, even though
 * they make the lanes wait for each other here. ldmatrix reads each row as
 * the lane that gave its address; cp.async writes its destination when issued
 * and again when its group is waited for (the copy lands in between).
 *
 * A shadow sits in the 128 bytes ahead of each array's data (shared_header),
 * so that an access finds it from the array's base in constant time. */
#include "emu/simt/simt_shared.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emu/simt/simt_internal.h"
#include "emu/simt/simt_runtime.h"

namespace bk_emu
{

/* 48 KiB of static shared memory per block on every architecture; the total
 * with the dynamic opt-in is the emulated architecture's (max_block_smem). */
enum { STATIC_SMEM_LIMIT = 48 * 1024 };

/* Static and dynamic shared memory of the launch within the architecture's
 * limit for a block. */
static void check_total_smem(const launch_state *L)
{
    if (L->static_smem + L->dyn_smem > max_block_smem())
        fail_thread("shared memory of %zu static + %zu dynamic bytes is over sm_%d's %zu per block",
                    L->static_smem, L->dyn_smem, arch(), max_block_smem());
}

int g_shared_watch = WATCH_RACES;

/* What the race detector knows of one byte in the current block. Epoch 0 is
 * none: the block's epochs start at 1. */
struct shadow_cell {
    uint32_t w_epoch, w_sync; /* epoch of the last write; the writer's warp's
                                 __syncwarp count then */
    uint32_t r_epoch;         /* epoch of the readers below */
    uint32_t r_sync[2];
    int16_t w_thread, r_thread[2]; /* thread indices in the block; -1: none */
};

/* Ahead of each array's data: its name and size, and its shadow. */
struct shared_header {
    const char *name;
    size_t bytes;
    shadow_cell *cells; /* NULL while the detector is off */
};
enum { HEADER_BYTES = 128 };
static_assert(sizeof(shared_header) <= HEADER_BYTES, "the header fits ahead of the data");

static shared_header *header_of(const void *data)
{
    return reinterpret_cast<shared_header *>((char *)const_cast<void *>(data) - HEADER_BYTES);
}

/* bytes of shared memory (0xff-filled) behind a header; NULL when out of memory */
static void *fresh(const char *name, size_t bytes, int racecheck)
{
    size_t rounded = (bytes + 127) / 128 * 128;
    char *p = static_cast<char *>(aligned_alloc(128, HEADER_BYTES + (rounded ? rounded : 128)));
    if (p == NULL) return NULL;
    memset(p + HEADER_BYTES, 0xff, rounded ? rounded : 128);
    shared_header *h = reinterpret_cast<shared_header *>(p);
    h->name = name;
    h->bytes = bytes;
    h->cells = NULL;
    if (racecheck && bytes > 0) {
        /* calloc: large shadows come as untouched zero pages */
        h->cells = static_cast<shadow_cell *>(calloc(bytes, sizeof(shadow_cell)));
        if (h->cells == NULL) {
            free(p);
            return NULL;
        }
    }
    return p + HEADER_BYTES;
}

static void release(void *data)
{
    if (data == NULL) return;
    free(header_of(data)->cells);
    free(header_of(data));
}

void shared_block_begin(launch_state *L)
{
    L->n_shared = 0;
    L->static_smem = 0;
    L->dyn_data = NULL;
    if (L->dyn_smem > 0) L->dyn_data = fresh("dynamic shared memory", L->dyn_smem, L->racecheck);
    L->epoch = 1;
    L->epoch_file = NULL;
    L->epoch_line = 0;
    for (int w = 0; w < L->n_slots / 32; w++) {
        L->syncs[w].count = L->syncs[w].full = 0;
        L->syncs[w].has_pair = 0;
    }
}

void shared_block_end(launch_state *L)
{
    for (int i = 0; i < L->n_shared; i++) release(L->shared[i].data);
    L->n_shared = 0;
    release(L->dyn_data);
    L->dyn_data = NULL;
}

void *shared_array(const void *site, const char *name, size_t bytes)
{
    launch_state *L = t_launch;
    for (int i = 0; i < L->n_shared; i++) {
        shared_entry *e = &L->shared[i];
        if (e->site != site) continue;
        if (e->bytes != bytes)
            fail_thread("__shared__ array %s declared with %zu bytes here and %zu bytes by another "
                        "thread",
                        name, bytes, e->bytes);
        return e->data;
    }
    if (L->n_shared == MAX_SHARED_ARRAYS)
        fail_thread("more than %d __shared__ arrays in one kernel", MAX_SHARED_ARRAYS);
    L->static_smem += bytes;
    if (L->static_smem > STATIC_SMEM_LIMIT)
        fail_thread("__shared__ array %s brings the static shared memory to %zu bytes, over the %d "
                    "of CUDA",
                    name, L->static_smem, (int)STATIC_SMEM_LIMIT);
    check_total_smem(L);
    shared_entry *e = &L->shared[L->n_shared++];
    e->site = site;
    e->name = name;
    e->bytes = bytes;
    e->data = fresh(name, bytes, L->racecheck);
    if (e->data == NULL) fail_thread("out of memory allocating %zu bytes of shared memory", bytes);
    return e->data;
}

void *shared_dynamic(const char *name, size_t *bytes)
{
    launch_state *L = t_launch;
    if (L->dyn_smem > 0 && L->dyn_data == NULL)
        fail_thread("out of memory allocating %zu bytes of dynamic shared memory (%s)", L->dyn_smem,
                    name);
    check_total_smem(L);
    *bytes = L->dyn_smem;
    if (L->dyn_data != NULL) header_of(L->dyn_data)->name = name; /* the kernel's name for it */
    return L->dyn_data;
}

void shared_oob(const char *name, int64_t index, int64_t count, int64_t n, size_t elem)
{
    if (count == 1)
        fail_thread("shared memory out of bounds: %s[%lld] of %lld elements of %zu bytes", name,
                    (long long)index, (long long)n, elem);
    fail_thread("shared memory out of bounds: %s[%lld .. %lld] of %lld elements of %zu bytes", name,
                (long long)index, (long long)(index + count - 1), (long long)n, elem);
}

void shared_misaligned(const char *name, int64_t byte_offset, size_t elem)
{
    fail_thread("shared memory: %s at byte offset %lld seen as %zu-byte elements (misaligned)",
                name, (long long)byte_offset, elem);
}

/* ---------------------------------------------------------------- race detector */

void set_racecheck(int on)
{
    g_shared_watch = on ? g_shared_watch | WATCH_RACES : g_shared_watch & ~WATCH_RACES;
}

void racecheck_barrier(launch_state *L, const char *file, int line)
{
    L->epoch++;
    L->epoch_file = file;
    L->epoch_line = line;
}

void racecheck_syncwarp(launch_state *L, int warp, unsigned mask)
{
    warp_syncs *w = &L->syncs[warp];
    uint32_t n = ++w->count;
    if (mask == 0xffffffffu) {
        w->full = n;
        return;
    }
    if (!w->has_pair) {
        if (w->pair == NULL) w->pair = static_cast<uint32_t(*)[32]>(malloc(32 * sizeof *w->pair));
        if (w->pair == NULL) fail_thread("out of memory for the race detector");
        memset(w->pair, 0, 32 * sizeof *w->pair);
        w->has_pair = 1;
    }
    for (int a = 0; a < 32; a++)
        if ((mask >> a) & 1u)
            for (int b = 0; b < 32; b++)
                if ((mask >> b) & 1u) w->pair[a][b] = n;
}

/* Whether an access by thread `other` when its warp's __syncwarp count was
 * `sync` is ordered before the current access by thread t. */
static int ordered(const launch_state *L, const thread_state *t, int other, uint32_t sync)
{
    if (other == t->index) return 1;
    if (other / 32 != t->warp) return 0; /* only a __syncthreads (a new epoch) orders them */
    const warp_syncs *w = &L->syncs[t->warp];
    return w->full > sync || (w->has_pair && w->pair[other % 32][t->lane] > sync);
}

[[noreturn]] static void report_race(const launch_state *L, const thread_state *t,
                                     const shared_header *h, size_t byte, int other,
                                     const char *first, const char *second)
{
    const thread_state *o = &L->threads[other];
    char since[256];
    if (L->epoch_file != NULL)
        snprintf(since, sizeof since, "after the __syncthreads at %s:%d", L->epoch_file,
                 L->epoch_line);
    else
        snprintf(since, sizeof since, "since the block started");
    fail_thread("shared-memory race on %s byte %zu (of %zu): %s by thread (%u,%u,%u) [index %d, "
                "warp %d lane %d], then %s by thread (%u,%u,%u) [index %d, warp %d lane %d], "
                "with no __syncthreads%s between them (both %s; source lines are not "
                "recorded)",
                h->name, byte, h->bytes, first, o->tid.x, o->tid.y, o->tid.z, o->index, o->warp,
                o->lane, second, t->tid.x, t->tid.y, t->tid.z, t->index, t->warp, t->lane,
                other / 32 == t->warp ? " or __syncwarp naming both" : "", since);
}

static void read_cell(const launch_state *L, const thread_state *t, const shared_header *h,
                      size_t byte, uint32_t sync)
{
    shadow_cell *c = &h->cells[byte];
    if (c->w_epoch == L->epoch && !ordered(L, t, c->w_thread, c->w_sync))
        report_race(L, t, h, byte, c->w_thread, "written", "read");
    if (c->r_epoch != L->epoch) {
        c->r_epoch = L->epoch;
        c->r_thread[0] = (int16_t)t->index, c->r_sync[0] = sync;
        c->r_thread[1] = -1;
    } else if (c->r_thread[0] == t->index) {
        c->r_sync[0] = sync;
    } else {
        /* the latest other reader: a third one is forgotten */
        c->r_thread[1] = (int16_t)t->index, c->r_sync[1] = sync;
    }
}

static void write_cell(const launch_state *L, const thread_state *t, const shared_header *h,
                       size_t byte, uint32_t sync)
{
    shadow_cell *c = &h->cells[byte];
    if (c->w_epoch == L->epoch && !ordered(L, t, c->w_thread, c->w_sync))
        report_race(L, t, h, byte, c->w_thread, "written", "written");
    if (c->r_epoch == L->epoch)
        for (int i = 0; i < 2; i++)
            if (c->r_thread[i] >= 0 && !ordered(L, t, c->r_thread[i], c->r_sync[i]))
                report_race(L, t, h, byte, c->r_thread[i], "read", "written");
    c->w_epoch = L->epoch;
    c->w_thread = (int16_t)t->index;
    c->w_sync = sync;
    c->r_epoch = 0; /* the readers are ordered before this write */
}

void racecheck_access(thread_state *t, const void *base, const void *p, size_t bytes, int is_write)
{
    launch_state *L = t_launch;
    if (!L->racecheck) return;
    const shared_header *h = header_of(base);
    if (h->cells == NULL) return;
    size_t first = (size_t)((const char *)p - (const char *)base);
    uint32_t sync = L->syncs[t->warp].count;
    for (size_t i = first; i < first + bytes; i++)
        if (is_write)
            write_cell(L, t, h, i, sync);
        else
            read_cell(L, t, h, i, sync);
}

void shared_read(const void *base, const void *p, size_t bytes)
{
    schedule_point(t_launch->current);
    racecheck_access(t_launch->current, base, p, bytes, 0);
}

void shared_write(const void *base, const void *p, size_t bytes)
{
    schedule_point(t_launch->current);
    racecheck_access(t_launch->current, base, p, bytes, 1);
}

} // namespace bk_emu
