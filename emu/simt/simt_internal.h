/* simt_internal.h: the SIMT emulator's state, shared by its own .cc files
 * (never included by kernel code): one launch, the block it is running, each
 * CUDA thread of that block with its fiber, its wait state and its pending
 * warp collective or cp.async copies; and the error path.
 *
 * A block runs on one OS thread: its CUDA threads are fibers that the
 * scheduler (simt_runtime.cc) resumes round-robin; each runs until it blocks
 * in a barrier or a warp collective, or exits. Blocks run one after another,
 * so everything here is per OS thread (__thread) and needs no locks. */
#ifndef BURST_EMU_SIMT_INTERNAL_H
#define BURST_EMU_SIMT_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "emu/simt/simt_fiber.h"
#include "emu/simt/simt_types.h"

namespace bk_emu
{

enum thread_run_state {
    T_RUN = 0, /* runnable */
    T_BARRIER, /* waiting in __syncthreads */
    T_WARP,    /* waiting in a warp collective */
    T_EXITED,  /* returned from the kernel */
    T_ABSENT,  /* lane of a partial last warp that the block does not have */
};

/* Kinds of warp collective; the names are used in error messages. */
enum collective_kind {
    C_SHFL_IDX = 0,
    C_SHFL_UP,
    C_SHFL_DOWN,
    C_SHFL_XOR,
    C_VOTE,
    C_SYNCWARP,
    C_MMA,
    C_LDMATRIX,
    C_N_KINDS
};
const char *collective_name(int kind);

/* One lane's part of a warp collective: its inputs, and its outputs written by
 * whichever lane completes the collective. */
struct collective {
    int kind;
    unsigned mask;
    const char *file;
    int line;
    uint64_t in[12];
    uint64_t out[4];
};

/* Called once, by the last lane to arrive, with every lane's part
 * (lanes[l] != NULL exactly for the lanes l of mask). */
typedef void (*collective_fn)(collective *lanes[32], unsigned mask);

/* A cp.async copy not yet performed (it happens at cp.async.wait_group). */
struct pending_copy {
    void *dst;
    const void *shared_base; /* base of dst's shared array (the race detector's) */
    const void *src;
    int bytes, src_bytes; /* src_bytes < bytes: the rest is zero-filled */
    int group;            /* commit group; -1 while not committed */
};
enum { MAX_PENDING_COPIES = 512 };

struct thread_state {
    fiber f;
    uint3 tid;
    int index, lane, warp;
    int state;
    const char *bar_file; /* the __syncthreads waited in (T_BARRIER) */
    int bar_line;
    collective c;         /* the warp collective waited in (T_WARP) */
    pending_copy *copies; /* [MAX_PENDING_COPIES], allocated on first use */
    int n_copies;
    int next_group;
};

/* A __shared__ array of the running block. */
struct shared_entry {
    const void *site; /* identifies the declaration */
    const char *name;
    size_t bytes;
    void *data;
};
enum { MAX_SHARED_ARRAYS = 64, MAX_WARPS = 1024 / 32 };

/* The race detector's record of a warp's __syncwarp calls in the running
 * block (simt_shared.cc): count numbers them; full is the number of the last
 * one of all 32 lanes, pair[a][b] that of the last one of a partial mask
 * naming lanes a and b (allocated at the first partial mask of the launch,
 * valid in this block when has_pair). */
struct warp_syncs {
    uint32_t count, full;
    int has_pair;
    uint32_t (*pair)[32];
};

struct launch_state {
    const char *name;
    const void *kernel; /* the launched function (its attributes), or NULL */
    dim3 grid, block;
    size_t dyn_smem;
    void (*body)(void *);
    void *ctx;

    uint3 block_idx;
    int n_threads;         /* threads of a block */
    int n_slots;           /* n_threads rounded up to whole warps */
    thread_state *threads; /* [n_slots] */
    thread_state *current; /* the thread whose fiber runs (NULL: the scheduler) */
    int n_live;            /* threads not exited */
    int n_barrier;         /* threads waiting in __syncthreads */

    /* The schedule (simt_runtime.cc): the launch's number on its OS thread;
     * under a random schedule, its generator; the order of the current
     * sweep over the threads (thread indices). */
    unsigned long long launch_no;
    int random;
    uint64_t rng;
    int16_t sweep[1024];
    int swept; /* sweep holds the launch's order (order_sweep) */

    shared_entry shared[MAX_SHARED_ARRAYS];
    int n_shared;
    size_t static_smem;
    void *dyn_data;

    /* The race detector (simt_shared.cc): on for this launch; the block's
     * barrier epoch (1 at its start, + 1 at each __syncthreads released) and
     * where the last barrier was; each warp's __syncwarp record. */
    int racecheck;
    uint32_t epoch;
    const char *epoch_file;
    int epoch_line;
    warp_syncs syncs[MAX_WARPS];

    int failed;
    char msg[1024];
};

/* The launch running on this OS thread (NULL outside a launch). */
extern __thread launch_state *t_launch;

/* Reports an error in the running thread of the running block, abandons the
 * launch and never returns (the thread's fiber is dropped). */
[[noreturn]] void fail_thread(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Suspends the running thread t (already marked as waiting) until the
 * scheduler resumes it. */
void scheduler_yield(thread_state *t);

/* Under a random schedule, may hand the running thread t back to the
 * scheduler, still runnable: called before each shared-memory access and each
 * warp collective, the points where another thread's progress can show. */
void schedule_point(thread_state *t);

/* Joins the calling lane to the warp collective described by *c (kind, mask,
 * file, line, in[]), waits until every lane of the mask has joined, and
 * returns with c->out filled in by fn. */
void collective_join(collective *c, collective_fn fn);

/* The lane's thread in the running block (T_ABSENT lanes included). */
thread_state *warp_lane(int warp, int lane);

/* Shared memory of the running block: reset at the block's start and end. */
void shared_block_begin(launch_state *L);
void shared_block_end(launch_state *L);

/* The race detector: a __syncthreads released (the block's next epoch, the
 * barrier at file:line); a __syncwarp of mask completed in warp `warp`. */
void racecheck_barrier(launch_state *L, const char *file, int line);
void racecheck_syncwarp(launch_state *L, int warp, unsigned mask);
/* Thread t reads (is_write 0) or writes bytes bytes at p, inside the shared
 * array whose data starts at base; a race fails the launch. */
void racecheck_access(thread_state *t, const void *base, const void *p, size_t bytes, int is_write);

/* Performs every cp.async copy of t still pending (at the thread's exit). */
void copies_flush(thread_state *t);

} // namespace bk_emu

#endif
