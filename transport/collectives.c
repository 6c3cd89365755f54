/* collectives.c: barrier, broadcast, all-gather, reduce-scatter and all-reduce
 * built from point-to-point messages on the transport's reserved channels, for
 * any communicator size (powers of two or not), plus the two-level all-reduce
 * that keeps every node's NIC busy at once.
 *
 * Ring algorithms move (P-1)/P of the data per rank per phase, which is
 * optimal in bandwidth; each reduced block is reduced by exactly one rank and
 * then copied, so all ranks end with bit-identical results. */
#include <stdlib.h>
#include <string.h>

#include "transport/internal.h"

enum {
    CH_BARRIER = BT_CHANNEL_RESERVED,
    CH_BCAST,
    CH_ALLGATHER,
    CH_REDUCE_SCATTER,
};
_Static_assert((int)CH_REDUCE_SCATTER < (int)BT_CHANNEL_ALLTOALL,
               "the host collectives' channels run into the all-to-all's");

static bt_status sendrecv(bt_comm *c, int channel, int to, const void *send, size_t send_bytes,
                          int from, void *recv, size_t recv_bytes)
{
    bt_request *reqs[2] = {NULL, NULL};
    bt_status st = bt_irecv(c, from, channel, recv, recv_bytes, &reqs[0]);
    if (st == BT_OK) st = bt_isend(c, to, channel, send, send_bytes, &reqs[1]);
    if (st != BT_OK) {
        if (reqs[0]) bt_waitall(1, &reqs[0]); /* fails fast: the world has failed */
        return st;
    }
    return bt_waitall(2, reqs);
}

bt_status bt_barrier(bt_comm *c)
{
    if (!c) return BT_ERR_ARG;
    char token = 0, got = 0;
    /* Dissemination: after round k every rank has heard from 2^k ranks. */
    for (int dist = 1; dist < c->size; dist <<= 1) {
        bt_status st = sendrecv(c, CH_BARRIER, (c->rank + dist) % c->size, &token, 1,
                                (c->rank - dist + c->size) % c->size, &got, 1);
        if (st != BT_OK) return st;
    }
    return BT_OK;
}

bt_status bt_bcast(bt_comm *c, void *buf, size_t bytes, int root)
{
    if (!c || root < 0 || root >= c->size || (bytes && !buf)) return BT_ERR_ARG;
    int size = c->size, rel = (c->rank - root + size) % size;
    /* Binomial tree over ranks relative to the root. */
    int mask = 1;
    while (mask < size) {
        if (rel & mask) {
            bt_request *r;
            bt_status st = bt_irecv(c, (c->rank - mask + size) % size, CH_BCAST, buf, bytes, &r);
            if (st == BT_OK) st = bt_wait(&r);
            if (st != BT_OK) return st;
            break;
        }
        mask <<= 1;
    }
    for (mask >>= 1; mask > 0; mask >>= 1) {
        if (rel + mask >= size) continue;
        bt_request *r;
        bt_status st = bt_isend(c, (c->rank + mask) % size, CH_BCAST, buf, bytes, &r);
        if (st == BT_OK) st = bt_wait(&r);
        if (st != BT_OK) return st;
    }
    return BT_OK;
}

bt_status bt_allgather(bt_comm *c, const void *send, void *recv, size_t bytes_per_rank)
{
    if (!c || (bytes_per_rank && (!send || !recv))) return BT_ERR_ARG;
    int size = c->size, rank = c->rank;
    unsigned char *out = recv;
    if (bytes_per_rank && out + (size_t)rank * bytes_per_rank != send)
        memcpy(out + (size_t)rank * bytes_per_rank, send, bytes_per_rank);
    int next = (rank + 1) % size, prev = (rank - 1 + size) % size;
    /* Step s forwards the block that arrived in step s-1 (our own first). */
    for (int s = 0; s < size - 1; s++) {
        int send_block = (rank - s + size) % size, recv_block = (rank - s - 1 + size) % size;
        bt_status st = sendrecv(c, CH_ALLGATHER, next, out + (size_t)send_block * bytes_per_rank,
                                bytes_per_rank, prev, out + (size_t)recv_block * bytes_per_rank,
                                bytes_per_rank);
        if (st != BT_OK) return st;
    }
    return BT_OK;
}

static void reduce_into(void *acc, const void *in, size_t count, bt_dtype t, bt_op op)
{
#define REDUCE(T)                                                                    \
    do {                                                                             \
        T *a = acc;                                                                  \
        const T *b = in;                                                             \
        for (size_t i = 0; i < count; i++)                                           \
            a[i] = op == BT_SUM ? a[i] + b[i] : op == BT_MAX ? (a[i] > b[i] ? a[i] : b[i]) \
                                                             : (a[i] < b[i] ? a[i] : b[i]); \
    } while (0)
    switch (t) {
    case BT_F32: REDUCE(float); break;
    case BT_F64: REDUCE(double); break;
    case BT_I64: REDUCE(int64_t); break;
    }
#undef REDUCE
}

/* A collective's buffer that could not be allocated: the world's error. */
static bt_status no_memory(bt_comm *c, size_t bytes)
{
    return bt_fail(c->world, BT_ERR_SYS, "out of memory: cannot allocate %zu bytes for a collective",
                   bytes);
}

/* Ring reduce-scatter over `work` ([size * count_per_rank] elements, reduced in
 * place): afterwards block `rank` of work holds the full reduction. */
static bt_status ring_reduce_scatter(bt_comm *c, unsigned char *work, size_t count_per_rank,
                                     bt_dtype t, bt_op op)
{
    int size = c->size, rank = c->rank;
    size_t block_bytes = count_per_rank * bt_dtype_size(t);
    unsigned char *incoming = malloc(block_bytes ? block_bytes : 1);
    if (!incoming) return no_memory(c, block_bytes);
    int next = (rank + 1) % size, prev = (rank - 1 + size) % size;
    bt_status st = BT_OK;
    for (int s = 0; s < size - 1 && st == BT_OK; s++) {
        int send_block = (rank - s - 1 + size) % size, recv_block = (rank - s - 2 + size) % size;
        st = sendrecv(c, CH_REDUCE_SCATTER, next, work + (size_t)send_block * block_bytes,
                      block_bytes, prev, incoming, block_bytes);
        if (st == BT_OK)
            reduce_into(work + (size_t)recv_block * block_bytes, incoming, count_per_rank, t, op);
    }
    free(incoming);
    return st;
}

bt_status bt_reduce_scatter(bt_comm *c, const void *send, void *recv, size_t count_per_rank,
                            bt_dtype t, bt_op op)
{
    if (!c || (count_per_rank && (!send || !recv)) || bt_dtype_size(t) == 0) return BT_ERR_ARG;
    size_t block_bytes = count_per_rank * bt_dtype_size(t);
    size_t total = block_bytes * (size_t)c->size;
    unsigned char *work = malloc(total ? total : 1);
    if (!work) return no_memory(c, total);
    if (total) memcpy(work, send, total);
    bt_status st = ring_reduce_scatter(c, work, count_per_rank, t, op);
    if (st == BT_OK && block_bytes)
        memcpy(recv, work + (size_t)c->rank * block_bytes, block_bytes);
    free(work);
    return st;
}

size_t bt_reduce_scatter_bytes(int size, size_t count_per_rank, bt_dtype t)
{
    /* bt_reduce_scatter's copy of send and ring_reduce_scatter's incoming block */
    return ((size_t)size + 1) * count_per_rank * bt_dtype_size(t);
}

size_t bt_allreduce_bytes(int size, size_t count, bt_dtype t)
{
    if (size <= 1 || count == 0) return 0;
    size_t per_rank = (count + (size_t)size - 1) / (size_t)size;
    /* bt_allreduce's padded copy and ring_reduce_scatter's incoming block */
    return ((size_t)size + 1) * per_rank * bt_dtype_size(t);
}

bt_status bt_allreduce(bt_comm *c, void *buf, size_t count, bt_dtype t, bt_op op)
{
    if (!c || (count && !buf) || bt_dtype_size(t) == 0) return BT_ERR_ARG;
    if (c->size == 1 || count == 0) return BT_OK;
    size_t elem = bt_dtype_size(t), size = (size_t)c->size;
    size_t per_rank = (count + size - 1) / size;
    /* Pad to a whole number of blocks; the padding is reduced and discarded. */
    unsigned char *work = calloc(per_rank * size, elem);
    if (!work) return no_memory(c, per_rank * size * elem);
    memcpy(work, buf, count * elem);
    bt_status st = ring_reduce_scatter(c, work, per_rank, t, op);
    if (st == BT_OK)
        st = bt_allgather(c, work + (size_t)c->rank * per_rank * elem, work, per_rank * elem);
    if (st == BT_OK) memcpy(buf, work, count * elem);
    free(work);
    return st;
}

bt_status bt_allreduce_hier(bt_world *w, void *buf, size_t count, bt_dtype t, bt_op op)
{
    if (!w || (count && !buf) || bt_dtype_size(t) == 0) return BT_ERR_ARG;
    /* Nodes with different rank counts have no common shard layout. */
    if (w->n_nodes == 1 || w->local_size < 0) return bt_allreduce(w->world_comm, buf, count, t, op);
    bt_status st = BT_OK;
    if (!w->intra_comm) st = bt_comm_intra_node(w, &w->intra_comm);
    if (st == BT_OK && !w->inter_comm) st = bt_comm_inter_node(w, &w->inter_comm);
    if (st != BT_OK) return st;
    size_t elem = bt_dtype_size(t), local = (size_t)w->local_size;
    size_t per_rank = (count + local - 1) / local;
    unsigned char *work = calloc(per_rank * local, elem);
    if (!work) return no_memory(w->world_comm, per_rank * local * elem);
    memcpy(work, buf, count * elem);
    unsigned char *shard = work + (size_t)w->local_rank * per_rank * elem;
    st = ring_reduce_scatter(w->intra_comm, work, per_rank, t, op);
    if (st == BT_OK) st = bt_allreduce(w->inter_comm, shard, per_rank, t, op);
    if (st == BT_OK) st = bt_allgather(w->intra_comm, shard, work, per_rank * elem);
    if (st == BT_OK) memcpy(buf, work, count * elem);
    free(work);
    return st;
}
