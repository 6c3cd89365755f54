/* simt_runtime.h: launching a kernel in the SIMT emulator, the built-in
 * variables (threadIdx, blockIdx, blockDim, gridDim), __syncthreads, and how
 * errors are reported.
 *
 * A launch runs the grid's blocks one after another on the calling OS thread;
 * the threads of a block are fibers (simt_fiber.h) resumed round-robin, each
 * until it blocks in __syncthreads or a warp collective or returns. A launch
 * is synchronous: when it returns, the kernel has finished.
 *
 * Errors found during a launch (a barrier that not every thread reaches, a
 * shared-memory access out of bounds, a warp collective whose lane mask names
 * an exited lane, ...) stop the launch with a message naming the kernel, the
 * block and the thread. By default the message goes to stderr and the process
 * aborts; bk_emu::set_fatal(0) makes the launch return -1 instead, with the
 * message in bk_emu::last_error() (the emulator's own tests use this). */
#ifndef BURST_EMU_SIMT_RUNTIME_H
#define BURST_EMU_SIMT_RUNTIME_H

#include <stddef.h>

#include <type_traits>

#include "emu/simt/simt_types.h"

namespace bk_emu
{

/* Runs body(ctx) as every thread of every block; 0 on success, -1 on an error
 * (when not fatal). kernel is the launched function, for its attributes. */
int launch_raw(const char *name, const void *kernel, dim3 grid, dim3 block, size_t dyn_smem,
               void (*body)(void *), void *ctx);

template <class F>
int launch(const char *name, const void *kernel, dim3 grid, dim3 block, size_t dyn_smem, F &&f)
{
    typedef typename std::remove_reference<F>::type fn_type;
    return launch_raw(
        name, kernel, grid, block, dyn_smem, [](void *p) { (*static_cast<fn_type *>(p))(); },
        static_cast<void *>(&f));
}

/* cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
 * bytes): as on a GPU, a launch with more than 48 KiB of dynamic shared
 * memory fails unless this raised the kernel's limit to at least that much.
 * -1 when bytes is over what a block of the emulated architecture may have
 * (max_block_smem). */
int func_set_max_dynamic_smem(const void *kernel, size_t bytes);

/* The architecture whose limits launches are held to: 80 (sm_80, the
 * default: the smaller limits) or 90 (sm_90), chosen by BK_EMU_ARCH=sm_80 or
 * sm_90 in the environment or by set_arch; -1 for any other. */
int set_arch(int sm);
int arch(void);
/* Shared memory a block may have on that architecture, with the kernel's
 * limit raised (bytes). */
size_t max_block_smem(void);

/* 0 when a launch of kernel with this grid, block and dynamic shared memory
 * is within CUDA's limits (what a launch checks first); else refuse_launch's
 * -1 with the reason. Deferred launches (simt_stream.h) are checked when they
 * are queued, as a GPU refuses a bad configuration at the launch. */
int check_launch_config(const char *name, const void *kernel, dim3 grid, dim3 block,
                        size_t dyn_smem);

/* A launch refused before it ran (a bad argument): kept as last_error()
 * ("bk_emu: kernel NAME: detail"), fatal as launch errors are; returns -1. */
int refuse_launch(const char *kernel, const char *detail);

/* An error found outside a launch (a stream hazard, simt_stream.h), kept as
 * last_error(); never fatal, the call that found it returns it. */
void note_error(const char *msg);

/* 1 (the default): an error prints its message and aborts the process.
 * 0: launch returns -1 and last_error() holds the message. */
void set_fatal(int fatal);
const char *last_error(void);

/* The schedule: the order in which the scheduler resumes the runnable threads
 * of a block and runs the blocks of a grid. spec is
 *   "forward"      threads by increasing index, blocks in x, y, z order (the
 *                  default);
 *   "reverse"      threads by decreasing index, blocks as forward;
 *   "random:SEED"  threads in a fresh random order at every sweep, a running
 *                  thread preempted at random before its shared-memory
 *                  accesses and warp collectives, blocks in a random order;
 *                  SEED (a decimal number) and the launch's number on its OS
 *                  thread fix the draws, and a launch that fails names both.
 * Also chosen by BK_EMU_SCHEDULE=spec in the environment. Results that change
 * with the schedule reveal a missing barrier or an order between blocks that
 * CUDA does not promise. Returns 0, or -1 for a spec it does not know. Takes
 * effect at the next launch. */
int set_schedule(const char *spec);
/* 1 when the schedule is random (simt_stream.cc draws its random run points
 * from the same seed), else 0; and that seed. */
int random_schedule(void);
unsigned long long random_schedule_seed(void);

/* 1: every launch runs only the first and the last block of its grid (by
 * linear index), for tests at 1M-token sizes that check the rows those blocks
 * cover (their grid-stride loops reach the last rows) on sparse buffers
 * (simt_memory.h); 0 (the default): every block. Not for anything else: the
 * other blocks' output is never written. */
void set_edge_blocks(int on);

/* 1 (the default): the shared-memory race detector runs in every launch
 * (simt_shared.cc); 0: it does not (also chosen by BK_EMU_RACECHECK=0 in the
 * environment). Takes effect at the next launch. */
void set_racecheck(int on);

/* 1 when this process may call the emulated CUDA runtime; else 0 with the
 * reason in why. As the CUDA runtime documents, a process that has
 * initialised it and then forks leaves a child that cannot use it: the first
 * call of a process makes it the runtime's owner, and a forked child, which
 * inherits the owner, is refused (cudaErrorInitializationError on a GPU).
 * Every runtime call of the emulated device and every launch asks first. */
int runtime_owned(char *why, size_t len);

/* Built-in variables of the running thread. GNU __thread rather than C++
 * thread_local: POD variables need no TLS wrapper functions (through which
 * GCC 12's UBSan reports false null-pointer loads). threadIdx and blockIdx
 * are read through pointers: GCC 12's UBSan folds the null check of a member
 * access on a TLS variable itself into a branch on stale flags, which
 * reported `blockIdx.x` as a null pointer in test_simt's atomics kernel. */
extern __thread const uint3 *t_thread_idx, *t_block_idx;
extern __thread uint3 t_block_dim, t_grid_dim;

/* __syncthreads() of the running thread, called from file:line. */
void syncthreads(const char *file, int line);

/* Statistics of this OS thread since the last reset: launches, blocks and
 * fiber switches (for measuring the emulator's cost). */
struct stats {
    long long launches, blocks, switches;
};
stats get_stats(void);
void reset_stats(void);

} // namespace bk_emu

#define threadIdx       (*bk_emu::t_thread_idx)
#define blockIdx        (*bk_emu::t_block_idx)
#define blockDim        (dim3(bk_emu::t_block_dim.x, bk_emu::t_block_dim.y, bk_emu::t_block_dim.z))
#define gridDim         (dim3(bk_emu::t_grid_dim.x, bk_emu::t_grid_dim.y, bk_emu::t_grid_dim.z))
#define warpSize        32
#define __syncthreads() bk_emu::syncthreads(__FILE__, __LINE__)

#endif
