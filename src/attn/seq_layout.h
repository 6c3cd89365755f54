/* seq_layout.h: how a global sequence of N tokens is split over the P ranks of
 * a context-parallel group, and the true global position of every local token
 * (RoPE, labels and masks all use global positions).
 *
 *   contiguous: rank r holds tokens [r*n, (r+1)*n), n = N/P.
 *   zigzag:     the sequence is cut into 2P chunks of n/2 tokens; rank r holds
 *               chunks r and 2P-1-r, so under a causal mask every rank does
 *               the same work and every off-diagonal block pair is half-full.
 *
 * With Ulysses groups of U ranks (seq_layout_set_ulysses), the layout places
 * the sequence over the P / U groups, group g taking what rank g of the plain
 * layout over P / U ranks would (U n tokens), and member m of group g (cp rank
 * g U + m) holds rows [m n, (m + 1) n) of the group's tokens in their local
 * order. So the group's all-to-all, gathering every member's rows in member
 * order, gives each member the group's whole block in the order the ring over
 * the groups (seq_layout_ring) expects. */
#ifndef BURST_SEQ_LAYOUT_H
#define BURST_SEQ_LAYOUT_H

#include <stddef.h>
#include <stdint.h>

typedef enum { LAYOUT_CONTIGUOUS = 0, LAYOUT_ZIGZAG = 1 } seq_layout_kind;

typedef struct {
    seq_layout_kind kind;
    int P;     /* ranks */
    int64_t N; /* global tokens */
    int64_t n; /* tokens per rank */
    int U;     /* ranks per Ulysses group: 1 (seq_layout_init), or seq_layout_set_ulysses' */
} seq_layout;

/* A run of consecutive global positions [begin, end) held by one rank. */
typedef struct {
    int64_t begin, end;
} seq_chunk;

/* Checks N against the layout (contiguous: P | N; zigzag: 2P | N); returns 0,
 * or -1 with a message naming the offending value. */
int seq_layout_init(seq_layout *l, seq_layout_kind kind, int P, int64_t N, char *err,
                    size_t err_len);
/* Splits the layout's P ranks into Ulysses groups of U consecutive ranks:
 * U must divide P, and the groups' layout over P / U ranks must split N (as
 * seq_layout_init checks); 0, or -1 with a message naming U. */
int seq_layout_set_ulysses(seq_layout *l, int U, char *err, size_t err_len);
/* The layout the ring runs on: over the P / U groups, blocks of U n tokens
 * (l itself when U = 1). */
seq_layout seq_layout_ring(const seq_layout *l);
const char *seq_layout_name(seq_layout_kind kind);
int seq_layout_parse(const char *name, seq_layout_kind *kind);

/* The chunks of a rank, in local order (1 or 2: a member of a Ulysses group
 * reaches into the group's second chunk only where the first ends inside its
 * rows); returns their count. */
int seq_layout_chunks(const seq_layout *l, int rank, seq_chunk chunks[2]);
/* The rank holding global position pos (0 <= pos < N), and in *row the
 * position's row in that rank's local order (as seq_layout_positions lists it). */
int seq_layout_owner(const seq_layout *l, int64_t pos, int64_t *row);
/* pos [n]: the global position of each local token of rank. */
void seq_layout_positions(const seq_layout *l, int rank, int64_t *pos);
/* local [n rows] = the rows of global [N rows] that rank holds (row_bytes each). */
void seq_layout_scatter(const seq_layout *l, int rank, const void *global, void *local,
                        size_t row_bytes);
/* The inverse: writes the rows rank holds into their places in global. */
void seq_layout_gather(const seq_layout *l, int rank, const void *local, void *global,
                       size_t row_bytes);

#endif
