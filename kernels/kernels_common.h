/* kernels_common.h: what every kernel of either backend shares: the queue a
 * kernel runs on, status codes, and the argument check that fails loudly in
 * debug builds and returns an error code otherwise.
 *
 * A kernel never touches hidden globals: everything it needs (where buffers
 * live, the CUDA stream, the CPU thread count, the arena its memory comes
 * from) comes through its bk_queue. The one thing a kernel leaves behind is
 * write-only, as errno is: the message of the calling thread's last failure
 * (bk_kernel_error). */
#ifndef BURST_KERNELS_COMMON_H
#define BURST_KERNELS_COMMON_H

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

typedef enum { BK_HOST = 0, BK_DEVICE = 1 } bk_location;

typedef enum {
    BK_OK = 0,
    BK_ERR_ARG,         /* NULL buffer, negative size, heads not dividing, ... */
    BK_ERR_UNSUPPORTED, /* a shape or location this backend does not handle */
    BK_ERR_DEVICE,      /* a device kernel, copy or library call failed (CUDA error, or an
                           error the SIMT emulator found in a kernel) */
    BK_ERR_NOMEM,       /* memory could not be had (host or device) */
} bk_status;

/* A caching arena of host or device memory (kernels/arena.h). */
typedef struct bk_arena bk_arena;

typedef struct {
    bk_location where; /* where the buffers passed with this queue live */
    void *stream;      /* cudaStream_t for BK_DEVICE; unused on the host */
    int n_threads;     /* OpenMP threads for BK_HOST; 0 = the OpenMP default */
    bk_arena *arena;   /* where bk_alloc and the device kernels' scratch take memory
                          (of the queue's kind); NULL: straight from the runtime */
} bk_queue;

/* The host queue with the OpenMP default thread count. */
static inline bk_queue bk_host_queue(void)
{
    bk_queue q = {BK_HOST, NULL, 0, NULL};
    return q;
}

const char *bk_status_name(bk_status st);

#ifdef __cplusplus
extern "C" {
#endif
/* What the calling thread's last kernel failure that carries a message was:
 * after a BK_ERR_DEVICE "device error: " and the runtime call or kernel that
 * failed with CUDA's error string ("device error: cudaMemcpyAsync: an
 * illegal memory access was encountered"), or the emulator's message; after
 * a BK_ERR_NOMEM of a kernel's own allocation "out of memory: cannot
 * allocate N bytes (H) for WHAT"; "" when there was none. Like
 * cudaGetLastError, but kept until the next such failure, so that whoever
 * reports a failed step can name it. */
const char *bk_kernel_error(void);
/* A kernel's allocation of bytes for what failed: records bk_kernel_error's
 * message (util/alloc.h's words) and returns BK_ERR_NOMEM. On the thread
 * that called the kernel: an OpenMP worker's message would not reach it. */
bk_status bk_out_of_memory(size_t bytes, const char *what);
#ifdef __cplusplus
}
#endif

/* Argument check: in debug builds (--enable-debug) a violated condition aborts
 * with the condition and location; otherwise the kernel returns BK_ERR_ARG. */
#ifdef BURST_DEBUG
#define BK_CHECK_ARG(cond)                                                                   \
    do {                                                                                     \
        if (!(cond)) {                                                                       \
            fprintf(stderr, "%s:%d: %s: invalid argument: %s\n", __FILE__, __LINE__, __func__, \
                    #cond);                                                                  \
            abort();                                                                         \
        }                                                                                    \
    } while (0)
#else
#define BK_CHECK_ARG(cond)                                                                   \
    do {                                                                                     \
        if (!(cond)) return BK_ERR_ARG;                                                      \
    } while (0)
#endif

#endif
