/* arena.c: the caching arena of arena.h.
 *
 * The arena's memory is cut into pieces that tile it without gaps, kept in an
 * array in address order: piece i covers [offset_i, offset_i + bytes_i), and
 * offset_{i+1} = offset_i + bytes_i. Allocating splits the best-fitting free
 * piece; freeing merges a piece with its free neighbours, so two free pieces
 * are never adjacent. The array stays short (a few hundred buffers per rank),
 * so linear scans and memmove beat a tree here. */
#include "kernels/arena.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/device.h"

typedef struct {
    size_t offset, bytes;
    int used;
} arena_piece;

struct bk_arena {
    bk_arena_memory memory;
    char *base;
    size_t capacity, in_use, peak;
    arena_piece *pieces; /* [n] in address order */
    size_t n, cap;
};

static size_t round_up(size_t bytes)
{
    return (bytes + BK_ARENA_ALIGN - 1) / BK_ARENA_ALIGN * BK_ARENA_ALIGN;
}

bk_status bk_arena_create(size_t capacity_bytes, bk_arena_memory memory, bk_arena **out)
{
    if (out == NULL || capacity_bytes == 0 || capacity_bytes > SIZE_MAX - BK_ARENA_ALIGN)
        return BK_ERR_ARG;
    *out = NULL;
    bk_arena *a = calloc(1, sizeof *a);
    if (a == NULL) return BK_ERR_NOMEM;
    a->memory = memory;
    a->capacity = round_up(capacity_bytes);
    a->cap = 64;
    a->pieces = malloc(a->cap * sizeof *a->pieces);
    bk_status st = a->pieces ? BK_OK : BK_ERR_NOMEM;
    if (st == BK_OK && memory == BK_ARENA_DEVICE) {
        void *p = NULL;
        st = bk_device_malloc(a->capacity, &p);
        if (st == BK_ERR_DEVICE) st = BK_ERR_NOMEM; /* what a failed cudaMalloc means */
        a->base = p;
    } else if (st == BK_OK) {
        a->base = aligned_alloc(BK_ARENA_ALIGN, a->capacity);
        if (a->base == NULL) st = BK_ERR_NOMEM;
    }
    if (st != BK_OK) {
        free(a->pieces);
        free(a);
        return st;
    }
    a->pieces[0] = (arena_piece){0, a->capacity, 0};
    a->n = 1;
    *out = a;
    return BK_OK;
}

void bk_arena_destroy(bk_arena *a)
{
    if (a == NULL) return;
    if (a->memory == BK_ARENA_DEVICE)
        bk_device_free(a->base);
    else
        free(a->base);
    free(a->pieces);
    free(a);
}

/* The free piece that holds bytes with the least left over, or n. */
static size_t best_fit(const bk_arena *a, size_t bytes)
{
    size_t best = a->n;
    for (size_t i = 0; i < a->n; i++) {
        const arena_piece *p = &a->pieces[i];
        if (!p->used && p->bytes >= bytes && (best == a->n || p->bytes < a->pieces[best].bytes))
            best = i;
    }
    return best;
}

/* Makes room for one more piece after index i (room in the array first). */
static int insert_after(bk_arena *a, size_t i, arena_piece piece)
{
    if (a->n == a->cap) {
        arena_piece *grown = realloc(a->pieces, 2 * a->cap * sizeof *grown);
        if (grown == NULL) return -1;
        a->pieces = grown, a->cap *= 2;
    }
    memmove(&a->pieces[i + 2], &a->pieces[i + 1], (a->n - i - 1) * sizeof *a->pieces);
    a->pieces[i + 1] = piece;
    a->n++;
    return 0;
}

void *bk_arena_alloc(bk_arena *a, size_t bytes)
{
    if (a == NULL || bytes == 0 || bytes > a->capacity) return NULL;
    bytes = round_up(bytes);
    size_t i = best_fit(a, bytes);
    if (i == a->n) return NULL;
    arena_piece *p = &a->pieces[i];
    if (p->bytes > bytes) {
        arena_piece rest = {p->offset + bytes, p->bytes - bytes, 0};
        if (insert_after(a, i, rest)) return NULL;
        p = &a->pieces[i]; /* the array may have moved */
        p->bytes = bytes;
    }
    p->used = 1;
    a->in_use += bytes;
    if (a->in_use > a->peak) a->peak = a->in_use;
    if (a->memory == BK_ARENA_DEVICE) bk_device_note_piece(a->base + p->offset, bytes);
    return a->base + p->offset;
}

/* Merges piece i with piece i + 1 (both free). */
static void merge_next(bk_arena *a, size_t i)
{
    a->pieces[i].bytes += a->pieces[i + 1].bytes;
    memmove(&a->pieces[i + 1], &a->pieces[i + 2], (a->n - i - 2) * sizeof *a->pieces);
    a->n--;
}

/* The index of the piece starting at offset (binary search), or n. */
static size_t piece_at(const bk_arena *a, size_t offset)
{
    size_t lo = 0, hi = a->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (a->pieces[mid].offset < offset)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < a->n && a->pieces[lo].offset == offset ? lo : a->n;
}

bk_status bk_arena_free(bk_arena *a, void *p)
{
    if (p == NULL) return BK_OK;
    if (a == NULL) return BK_ERR_ARG;
    uintptr_t at = (uintptr_t)p, base = (uintptr_t)a->base;
    if (at < base || at - base >= a->capacity) return BK_ERR_ARG; /* not this arena's */
    size_t i = piece_at(a, (size_t)(at - base));
    if (i == a->n || !a->pieces[i].used) return BK_ERR_ARG;
    a->pieces[i].used = 0;
    a->in_use -= a->pieces[i].bytes;
    if (a->memory == BK_ARENA_DEVICE) bk_device_note_piece(p, 0);
    if (i + 1 < a->n && !a->pieces[i + 1].used) merge_next(a, i);
    if (i > 0 && !a->pieces[i - 1].used) merge_next(a, i - 1);
    return BK_OK;
}

bk_arena_stats bk_arena_stats_of(const bk_arena *a)
{
    bk_arena_stats s = {0};
    if (a == NULL) return s;
    s.capacity = a->capacity, s.in_use = a->in_use, s.peak = a->peak;
    for (size_t i = 0; i < a->n; i++) {
        const arena_piece *p = &a->pieces[i];
        if (p->used)
            s.pieces++;
        else if (p->bytes > s.largest_free)
            s.largest_free = p->bytes;
    }
    return s;
}

void bk_arena_reset_peak(bk_arena *a)
{
    if (a != NULL) a->peak = a->in_use;
}
