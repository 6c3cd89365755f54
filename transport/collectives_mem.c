/* collectives_mem.c: all-reduce, reduce-scatter and all-gather on buffers of
 * either memory kind. Host buffers go to the host collectives
 * (collectives.c). Device buffers go through NCCL when NCCL serves the node
 * and the communicator is exactly the node's ranks in local-rank order (the
 * one NCCL communicator the transport keeps for collectives); otherwise they
 * are staged: copied into host memory, combined by the host collectives, and
 * copied back, every copy waited for. Blocking, like the host collectives. */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "transport/internal.h"

#ifdef HAVE_NCCL
/* c is the node's ranks in local-rank order and NCCL serves the node. */
static int nccl_covers(const bt_comm *c)
{
    const bt_world *w = c->world;
    if (!w->nccl || c->size != w->local_size || c->size < 2) return 0;
    int first = w->rank - w->local_rank; /* node-major: the node's ranks are consecutive */
    for (int i = 0; i < c->size; i++)
        if (c->world_ranks[i] != first + i) return 0;
    return 1;
}
#endif

/* Checks common to the three: arguments, no open group, a device path. */
static bt_status check_call(bt_comm *c, bt_mem mem)
{
    if (!c || (mem != BT_MEM_HOST && mem != BT_MEM_DEVICE)) return BT_ERR_ARG;
    bt_world *w = c->world;
    if (w->in_group) return BT_ERR_ARG;
    bt_status st = (bt_status)atomic_load(&w->failed);
    if (st != BT_OK) return st;
    if (mem == BT_MEM_DEVICE && !w->has_hooks) return bt_mem_check(w, NULL, w->rank, mem);
    return BT_OK;
}

/* A host buffer for a staged collective. */
static void *host_buffer(bt_comm *c, size_t bytes, bt_status *st)
{
    void *p = malloc(bytes ? bytes : 1);
    if (!p)
        *st = bt_fail(c->world, BT_ERR_SYS, "out of memory: cannot stage %zu bytes of a collective",
                      bytes);
    return p;
}

enum { DIR_H2D = 0, DIR_D2H = 1 };

bt_status bt_allreduce_mem(bt_comm *c, void *buf, size_t count, bt_dtype t, bt_op op, bt_mem mem)
{
    bt_status st = check_call(c, mem);
    if (st != BT_OK) return st;
    if (mem == BT_MEM_HOST) return bt_allreduce(c, buf, count, t, op);
    if (bt_dtype_size(t) == 0 || (count && !buf)) return BT_ERR_ARG;
    if (c->size == 1 || count == 0) return BT_OK;
#ifdef HAVE_NCCL
    if (nccl_covers(c))
        return bt_nccl_collective(c->world->nccl, BT_COLL_ALLREDUCE, buf, buf, count, t, op);
#endif
    size_t bytes = count * bt_dtype_size(t);
    void *host = host_buffer(c, bytes, &st);
    if (host) st = bt_device_copy_wait(c->world, host, buf, bytes, DIR_D2H);
    if (st == BT_OK) st = bt_allreduce(c, host, count, t, op);
    if (st == BT_OK) st = bt_device_copy_wait(c->world, buf, host, bytes, DIR_H2D);
    free(host);
    return st;
}

bt_status bt_reduce_scatter_mem(bt_comm *c, const void *send, void *recv, size_t count_per_rank,
                                bt_dtype t, bt_op op, bt_mem mem)
{
    bt_status st = check_call(c, mem);
    if (st != BT_OK) return st;
    if (mem == BT_MEM_HOST) return bt_reduce_scatter(c, send, recv, count_per_rank, t, op);
    if (bt_dtype_size(t) == 0 || (count_per_rank && (!send || !recv))) return BT_ERR_ARG;
    if (count_per_rank == 0) return BT_OK;
#ifdef HAVE_NCCL
    if (nccl_covers(c))
        return bt_nccl_collective(c->world->nccl, BT_COLL_REDUCE_SCATTER, send, recv,
                                  count_per_rank, t, op);
#endif
    size_t block = count_per_rank * bt_dtype_size(t), total = block * (size_t)c->size;
    unsigned char *host = host_buffer(c, total + block, &st);
    if (host) st = bt_device_copy_wait(c->world, host, send, total, DIR_D2H);
    if (st == BT_OK) st = bt_reduce_scatter(c, host, host + total, count_per_rank, t, op);
    if (st == BT_OK) st = bt_device_copy_wait(c->world, recv, host + total, block, DIR_H2D);
    free(host);
    return st;
}

bt_status bt_allgather_mem(bt_comm *c, const void *send, void *recv, size_t bytes_per_rank,
                           bt_mem mem)
{
    bt_status st = check_call(c, mem);
    if (st != BT_OK) return st;
    if (mem == BT_MEM_HOST) return bt_allgather(c, send, recv, bytes_per_rank);
    if (bytes_per_rank && (!send || !recv)) return BT_ERR_ARG;
    if (bytes_per_rank == 0) return BT_OK;
#ifdef HAVE_NCCL
    if (nccl_covers(c))
        return bt_nccl_collective(c->world->nccl, BT_COLL_ALLGATHER, send, recv, bytes_per_rank,
                                  BT_F32, BT_SUM);
#endif
    size_t total = bytes_per_rank * (size_t)c->size;
    unsigned char *host = host_buffer(c, total, &st);
    unsigned char *mine = host ? host + (size_t)c->rank * bytes_per_rank : NULL;
    if (host) st = bt_device_copy_wait(c->world, mine, send, bytes_per_rank, DIR_D2H);
    if (st == BT_OK) st = bt_allgather(c, mine, host, bytes_per_rank);
    if (st == BT_OK) st = bt_device_copy_wait(c->world, recv, host, total, DIR_H2D);
    free(host);
    return st;
}
