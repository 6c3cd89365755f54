/* arena.h: one caching arena per rank for the buffers of the training engine.
 *
 * The arena takes its memory once, when it is made (device memory through
 * bk_device_malloc, or host memory), and hands out pieces of it: nothing
 * allocates from the runtime inside a training step (cudaMalloc synchronises
 * the device), a run that cannot fit fails when it is set up rather than at
 * step 1000, and the peak is measured, not estimated.
 *
 * Pieces are aligned to BK_ARENA_ALIGN bytes (cuBLASLt, ldmatrix and vector
 * loads want 16; 256 keeps every piece on its own cache lines and DRAM bursts).
 * Free pieces are kept in address order and merged with free neighbours, and
 * a request takes the smallest free piece that holds it (best fit), which
 * keeps the large holes for large requests. Not thread-safe: one thread owns
 * an arena. */
#ifndef BURST_KERNELS_ARENA_H
#define BURST_KERNELS_ARENA_H

#include <stddef.h>

#include "kernels/kernels_common.h"

#ifdef __cplusplus
extern "C" {
#endif

#define BK_ARENA_ALIGN 256

/* bk_arena itself is declared in kernels_common.h: a queue names its arena. */

/* Where an arena's memory comes from. */
typedef enum { BK_ARENA_HOST = 0, BK_ARENA_DEVICE = 1 } bk_arena_memory;

/* An arena of capacity_bytes (rounded up to BK_ARENA_ALIGN) of the given
 * memory, taken now. BK_ERR_ARG for a zero capacity or NULL out;
 * BK_ERR_NOMEM when the memory cannot be had, BK_ERR_UNSUPPORTED for device
 * memory in a program without a device. */
bk_status bk_arena_create(size_t capacity_bytes, bk_arena_memory memory, bk_arena **out);
/* Gives the memory back; every piece becomes invalid. NULL is a no-op. */
void bk_arena_destroy(bk_arena *a);

/* A piece of bytes (> 0) bytes, aligned to BK_ARENA_ALIGN, or NULL when no free
 * piece is large enough (largest_free of bk_arena_stats_of says what would fit). */
void *bk_arena_alloc(bk_arena *a, size_t bytes);
/* Returns a piece to the arena. p must come from bk_arena_alloc of this arena
 * and not be freed yet (anything else is a caller's bug: BK_ERR_ARG and
 * nothing changes). NULL is a no-op. */
bk_status bk_arena_free(bk_arena *a, void *p);

/* Accounting, in bytes as handed out (each request rounded up to the
 * alignment). */
typedef struct {
    size_t capacity;     /* the arena's size */
    size_t in_use;       /* pieces handed out and not freed */
    size_t peak;         /* the largest in_use so far */
    size_t largest_free; /* the largest request that would succeed now */
    size_t pieces;       /* pieces handed out and not freed */
} bk_arena_stats;
bk_arena_stats bk_arena_stats_of(const bk_arena *a);
/* Forgets the peak so far: the next peak is measured from in_use now. */
void bk_arena_reset_peak(bk_arena *a);

#ifdef __cplusplus
}
#endif

#endif
