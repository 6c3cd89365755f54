/* alltoall.c: the all-to-all, on host or device memory, as one group of
 * point-to-point messages on its reserved channel (BT_CHANNEL_ALLTOALL): a
 * receive from every member, then a send to every member, then a wait for
 * all of them. Each message takes its pair's own path: host memory UCX (or
 * the self backend), device memory NCCL where NCCL serves the pair's node
 * (queued on the collectives' stream, the whole exchange in one NCCL group,
 * as NCCL's documentation builds an all-to-all from ncclSend and ncclRecv),
 * UCX directly, or the staging pipeline. The block to itself is a message
 * too, which the self backend copies at once into the receive posted before
 * it (a memcpy, or a device-to-device copy waited for).
 *
 * Step k receives from rank - k and sends to rank + k, so that at each step
 * every rank is one sender's and one receiver's partner instead of every
 * rank sending to member 0 first. */
#include <stdint.h>
#include <stdlib.h>

#include "transport/internal.h"

/* Two blocks of bytes share one. */
static int overlap(const unsigned char *a, size_t a_bytes, const unsigned char *b, size_t b_bytes)
{
    uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
    return a_bytes && b_bytes && x < y + b_bytes && y < x + a_bytes;
}

/* The block at base + off of bytes (NULL when empty, so that an empty block
 * of a NULL buffer is never pointer arithmetic on NULL). */
static unsigned char *block_at(const void *base, size_t off, size_t bytes)
{
    return bytes ? (unsigned char *)base + off : NULL;
}

/* One side's blocks lie in a buffer that is there and do not wrap around. */
static int blocks_valid(int n, const void *base, const size_t *bytes, const size_t *off)
{
    if (!bytes || !off) return 0;
    uintptr_t room = UINTPTR_MAX - (uintptr_t)base; /* bytes past base */
    for (int i = 0; i < n; i++)
        if (bytes[i] && (!base || bytes[i] > room || off[i] > room - bytes[i])) return 0;
    return 1;
}

/* A receive block overlaps another or a send block (a quadratic look, as
 * cheap as the messages' posts for the sizes of a communicator). */
static int receives_overlap(int n, const void *send, const size_t *send_bytes,
                            const size_t *send_off, void *recv, const size_t *recv_bytes,
                            const size_t *recv_off)
{
    for (int i = 0; i < n; i++) {
        unsigned char *r = block_at(recv, recv_off[i], recv_bytes[i]);
        for (int j = 0; j < n; j++) {
            if (j > i && overlap(r, recv_bytes[i], block_at(recv, recv_off[j], recv_bytes[j]),
                                 recv_bytes[j]))
                return 1;
            if (overlap(r, recv_bytes[i], block_at(send, send_off[j], send_bytes[j]),
                        send_bytes[j]))
                return 1;
        }
    }
    return 0;
}

/* Posts the exchange into reqs [2 * size] (receives first, so that the block
 * to itself finds its receive) inside one group. */
static bt_status post_exchange(bt_comm *c, const void *send, const size_t *send_bytes,
                               const size_t *send_off, void *recv, const size_t *recv_bytes,
                               const size_t *recv_off, bt_mem mem, bt_request **reqs)
{
    int n = c->size, ch = BT_CHANNEL_ALLTOALL;
    bt_status st = bt_group_start(c->world);
    for (int k = 0; k < n && st == BT_OK; k++) {
        int from = (c->rank - k + n) % n;
        st = bt_irecv_mem(c, from, ch, block_at(recv, recv_off[from], recv_bytes[from]),
                          recv_bytes[from], mem, &reqs[k]);
    }
    for (int k = 0; k < n && st == BT_OK; k++) {
        int to = (c->rank + k) % n;
        st = bt_isend_mem(c, to, ch, block_at(send, send_off[to], send_bytes[to]), send_bytes[to],
                          mem, &reqs[n + k]);
    }
    bt_status end = bt_group_end(c->world);
    return st != BT_OK ? st : end;
}

bt_status bt_alltoallv_mem(bt_comm *c, const void *send, const size_t *send_bytes,
                           const size_t *send_off, void *recv, const size_t *recv_bytes,
                           const size_t *recv_off, bt_mem mem)
{
    bt_status st = bt_collective_check(c, mem);
    if (st != BT_OK) return st;
    int n = c->size;
    if (!blocks_valid(n, send, send_bytes, send_off) ||
        !blocks_valid(n, recv, recv_bytes, recv_off) ||
        receives_overlap(n, send, send_bytes, send_off, recv, recv_bytes, recv_off))
        return BT_ERR_ARG;
    bt_request **reqs =
        bt_calloc(c->world, 2 * (size_t)n * sizeof *reqs, "an all-to-all's requests");
    if (!reqs) return BT_ERR_SYS;
    st = post_exchange(c, send, send_bytes, send_off, recv, recv_bytes, recv_off, mem, reqs);
    /* After a failed post the world has failed (a post that fails records
     * why), so the wait drops what was posted at once. */
    bt_status done = bt_waitall(2 * n, reqs);
    free(reqs);
    return st != BT_OK ? st : done;
}

bt_status bt_alltoall_mem(bt_comm *c, const void *send, void *recv, size_t bytes_per_rank,
                          bt_mem mem)
{
    if (!c || (bytes_per_rank && (size_t)c->size > SIZE_MAX / bytes_per_rank)) return BT_ERR_ARG;
    int n = c->size;
    size_t *sizes = bt_calloc(c->world, 2 * (size_t)n * sizeof *sizes, "an all-to-all's blocks");
    if (!sizes) return BT_ERR_SYS;
    size_t *offs = sizes + n;
    for (int i = 0; i < n; i++) {
        sizes[i] = bytes_per_rank;
        offs[i] = (size_t)i * bytes_per_rank;
    }
    bt_status st = bt_alltoallv_mem(c, send, sizes, offs, recv, sizes, offs, mem);
    free(sizes);
    return st;
}
