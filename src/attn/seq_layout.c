/* seq_layout.c: see seq_layout.h. */
#include <stdio.h>
#include <string.h>

#include "src/attn/seq_layout.h"

int seq_layout_init(seq_layout *l, seq_layout_kind kind, int P, int64_t N, char *err,
                    size_t err_len)
{
    int64_t unit = kind == LAYOUT_ZIGZAG ? 2 * (int64_t)P : P;
    if (P < 1 || N < 1 || N % unit != 0) {
        snprintf(err, err_len,
                 "sequence length %lld does not split over %d ranks with the %s layout "
                 "(it must be a positive multiple of %lld)",
                 (long long)N, P, seq_layout_name(kind), (long long)unit);
        return -1;
    }
    l->kind = kind;
    l->P = P;
    l->N = N;
    l->n = N / P;
    l->U = 1;
    return 0;
}

int seq_layout_set_ulysses(seq_layout *l, int U, char *err, size_t err_len)
{
    seq_layout groups;
    if (U < 1 || l->P % U != 0) {
        snprintf(err, err_len, "ulysses = %d does not divide the %d context-parallel ranks", U,
                 l->P);
        return -1;
    }
    if (seq_layout_init(&groups, l->kind, l->P / U, l->N, err, err_len) != 0) return -1;
    l->U = U;
    return 0;
}

seq_layout seq_layout_ring(const seq_layout *l)
{
    return (seq_layout){l->kind, l->P / l->U, l->N, l->n * l->U, 1};
}

const char *seq_layout_name(seq_layout_kind kind)
{
    return kind == LAYOUT_ZIGZAG ? "zigzag" : "contiguous";
}

int seq_layout_parse(const char *name, seq_layout_kind *kind)
{
    if (strcmp(name, "contiguous") == 0) *kind = LAYOUT_CONTIGUOUS;
    else if (strcmp(name, "zigzag") == 0) *kind = LAYOUT_ZIGZAG;
    else return -1;
    return 0;
}

/* The chunks of rank in the plain layout (U = 1). */
static int plain_chunks(const seq_layout *l, int rank, seq_chunk chunks[2])
{
    if (l->kind == LAYOUT_CONTIGUOUS) {
        chunks[0] = (seq_chunk){rank * l->n, (rank + 1) * l->n};
        return 1;
    }
    int64_t half = l->n / 2, late = 2 * (int64_t)l->P - 1 - rank;
    chunks[0] = (seq_chunk){rank * half, (rank + 1) * half};
    chunks[1] = (seq_chunk){late * half, (late + 1) * half};
    return 2;
}

static int plain_owner(const seq_layout *l, int64_t pos, int64_t *row)
{
    if (l->kind == LAYOUT_CONTIGUOUS) {
        *row = pos % l->n;
        return (int)(pos / l->n);
    }
    int64_t half = l->n / 2, chunk = pos / half, offset = pos - chunk * half;
    if (chunk < l->P) { /* the early chunk comes first in local order */
        *row = offset;
        return (int)chunk;
    }
    *row = half + offset;
    return (int)(2 * l->P - 1 - chunk);
}

int seq_layout_chunks(const seq_layout *l, int rank, seq_chunk chunks[2])
{
    if (l->U == 1) return plain_chunks(l, rank, chunks);
    seq_layout ring = seq_layout_ring(l);
    seq_chunk group[2];
    int n_group = plain_chunks(&ring, rank / l->U, group), n = 0;
    /* rows [lo, hi) of the group's tokens in local order */
    int64_t lo = (rank % l->U) * l->n, hi = lo + l->n, at = 0;
    for (int k = 0; k < n_group; k++) {
        int64_t len = group[k].end - group[k].begin;
        int64_t b = lo > at ? lo - at : 0, e = hi - at < len ? hi - at : len;
        if (b < e) chunks[n++] = (seq_chunk){group[k].begin + b, group[k].begin + e};
        at += len;
    }
    return n;
}

int seq_layout_owner(const seq_layout *l, int64_t pos, int64_t *row)
{
    if (l->U == 1) return plain_owner(l, pos, row);
    seq_layout ring = seq_layout_ring(l);
    int64_t group_row;
    int group = plain_owner(&ring, pos, &group_row);
    *row = group_row % l->n;
    return group * l->U + (int)(group_row / l->n);
}

void seq_layout_positions(const seq_layout *l, int rank, int64_t *pos)
{
    seq_chunk c[2];
    int n_chunks = seq_layout_chunks(l, rank, c);
    int64_t i = 0;
    for (int k = 0; k < n_chunks; k++)
        for (int64_t p = c[k].begin; p < c[k].end; p++) pos[i++] = p;
}

static void copy_rows(const seq_layout *l, int rank, const void *from, void *to, size_t row_bytes,
                      int to_local)
{
    seq_chunk c[2];
    int n_chunks = seq_layout_chunks(l, rank, c);
    size_t local_row = 0;
    for (int k = 0; k < n_chunks; k++) {
        size_t rows = (size_t)(c[k].end - c[k].begin), bytes = rows * row_bytes;
        size_t global_off = (size_t)c[k].begin * row_bytes, local_off = local_row * row_bytes;
        if (to_local)
            memcpy((char *)to + local_off, (const char *)from + global_off, bytes);
        else
            memcpy((char *)to + global_off, (const char *)from + local_off, bytes);
        local_row += rows;
    }
}

void seq_layout_scatter(const seq_layout *l, int rank, const void *global, void *local,
                        size_t row_bytes)
{
    copy_rows(l, rank, global, local, row_bytes, 1);
}

void seq_layout_gather(const seq_layout *l, int rank, const void *local, void *global,
                       size_t row_bytes)
{
    copy_rows(l, rank, local, global, row_bytes, 0);
}
