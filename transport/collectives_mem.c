/* collectives_mem.c: all-reduce, reduce-scatter and all-gather on buffers of
 * either memory kind. Host buffers go to the host collectives
 * (collectives.c). Device buffers go through NCCL when NCCL serves the node
 * and the communicator is exactly the node's ranks in local-rank order (the
 * one NCCL communicator the transport keeps for collectives); otherwise they
 * are staged through host memory and combined by the host collectives.
 * Blocking, like the host collectives.
 *
 * Staged, a collective runs as a pipeline of pieces through three pinned
 * buffers of the staging pool (when the world stages some peer, so that
 * there is a pool): the host ring cuts the buffer into P blocks (all-reduce:
 * ceil(count / P) elements, zero-padded; reduce-scatter and all-gather: each
 * rank's share), and piece k is the k-th slice of c elements of every block,
 * side by side (c: as many as P slices of one chunk hold). The host
 * collective of a piece has exactly those slices as its blocks, and a ring
 * reduces each block in an order that depends on its index alone, so every
 * element is combined as the whole buffer's collective combines it: the
 * results are the same to the bit. While the host collective of piece k is
 * on the wire, the copy of piece k+1 out of the device and the copy of piece
 * k-1 back run on the pool's two streams. Without a pool (every peer's path
 * NCCL or direct), or when P slices of one element do not fit in a chunk,
 * the buffer is staged whole: copied out, combined, copied back, every copy
 * waited for. */
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

bt_status bt_collective_check(bt_comm *c, bt_mem mem)
{
    if (!c || (mem != BT_MEM_HOST && mem != BT_MEM_DEVICE)) return BT_ERR_ARG;
    bt_world *w = c->world;
    if (w->in_group) return BT_ERR_ARG;
    bt_status st = (bt_status)atomic_load(&w->failed);
    if (st != BT_OK) {
        atomic_store(&w->error_seen, 1); /* the caller has it: the watchdog leaves it to them */
        return st;
    }
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

/* ------------------------------------------------------------------ the pipeline */

enum { PIPE_BUFS = 3 }; /* a piece copied in, one on the wire, one copied back */

/* Where the slices of a piece come from or go to on the device: blocks
 * [first, first + n) of the piece's P, block b at dev + (b - first) * stride,
 * cut at the buffer's end (bytes; the all-reduce's padding is not on the
 * device). */
typedef struct {
    unsigned char *dev;
    size_t stride, bytes;
    int first, n;
} pipe_side;

/* A staged collective as pieces: the host collective of each (BT_COLL_*),
 * its type and operation, the elements of one block and of a piece's slice
 * (elem bytes each), what is copied in and out. */
typedef struct {
    bt_comm *c;
    int kind;
    bt_dtype t;
    bt_op op;
    size_t elem, block, slice;
    pipe_side in, out;
    void *streams[2]; /* DIR_H2D, DIR_D2H */
} pipe_plan;

/* Elements of piece k's slice of each block: slice, or what is left of the
 * block for the last piece. */
static size_t piece_elems(const pipe_plan *p, size_t k)
{
    size_t left = p->block - k * p->slice;
    return left < p->slice ? left : p->slice;
}

/* Queues the copies of piece k between the device and host (dir) on the
 * pool's stream of that direction, slot b of the piece at host + b * len
 * (len: the piece's slice in bytes), then the buffer's event; copied in, the
 * slot's bytes past the device buffer's end are zeroed. 0 or -1. */
static int copy_piece(bt_world *w, const pipe_plan *p, const pipe_side *side, size_t k,
                      bt_stage_buf *buf, int dir)
{
    size_t off = k * p->slice * p->elem, len = piece_elems(p, k) * p->elem;
    unsigned char *host = buf->host;
    for (int b = side->first; b < side->first + side->n; b++) {
        size_t at = (size_t)(b - side->first) * side->stride + off;
        size_t n = at >= side->bytes ? 0 : side->bytes - at < len ? side->bytes - at : len;
        unsigned char *h = host + (size_t)b * len, *d = side->dev + at;
        if (dir == DIR_D2H && n < len) memset(h + n, 0, len - n);
        if (n && w->hooks.copy_async(p->streams[dir], dir == DIR_D2H ? (void *)h : (void *)d,
                                     dir == DIR_D2H ? (const void *)d : (const void *)h, n, dir))
            return -1;
    }
    return w->hooks.event_record(buf->event, p->streams[dir]) == 0 ? 0 : -1;
}

/* The host collective of piece k (a slice of `count` elements per block),
 * in place in host: every block's slot in, the result where copy_piece
 * takes it out (reduce-scatter: slot 0). */
static bt_status combine_piece(const pipe_plan *p, unsigned char *host, size_t count)
{
    bt_comm *c = p->c;
    switch (p->kind) {
    case BT_COLL_ALLREDUCE:
        return bt_allreduce(c, host, count * (size_t)c->size, p->t, p->op);
    case BT_COLL_REDUCE_SCATTER:
        return bt_reduce_scatter(c, host, host, count, p->t, p->op);
    default:
        return bt_allgather(c, host + (size_t)c->rank * count, host, count);
    }
}

/* After a failure: the copies still queued into or out of the buffers end
 * before the buffers go back (bounded, as a dropped staged message's). */
static void drain(bt_world *w, bt_stage_buf **bufs, const int *pending)
{
    for (int i = 0; i < PIPE_BUFS; i++)
        for (long polls = 0; pending[i] && polls < 100000000L; polls++)
            if (w->hooks.event_query(bufs[i]->event) != 0) break;
}

static bt_status copy_failed(bt_world *w)
{
    return bt_device_fail(w, "a copy of a staged collective");
}

/* Runs p piece by piece: piece k + 1 is copied in and piece k - 1 copied
 * out while piece k is combined. */
static bt_status run_pipeline(pipe_plan *p)
{
    bt_world *w = p->c->world;
    bt_stage_buf *bufs[PIPE_BUFS];
    bt_status st = bt_staging_lend(w, PIPE_BUFS, bufs, &p->streams[DIR_D2H], &p->streams[DIR_H2D]);
    if (st != BT_OK) return st;
    size_t pieces = (p->block + p->slice - 1) / p->slice;
    int pending[PIPE_BUFS] = {0}; /* a copy is queued into or out of the buffer */
    if (copy_piece(w, p, &p->in, 0, bufs[0], DIR_D2H) != 0) st = copy_failed(w);
    pending[0] = 1;
    for (size_t k = 0; k < pieces && st == BT_OK; k++) {
        int now = (int)(k % PIPE_BUFS), next = (int)((k + 1) % PIPE_BUFS);
        if (k + 1 < pieces) { /* its buffer's copy out (piece k - 2) must have run */
            if (pending[next])
                st = bt_device_event_wait(w, bufs[next]->event, "a staged collective's copy");
            if (st == BT_OK && copy_piece(w, p, &p->in, k + 1, bufs[next], DIR_D2H) != 0)
                st = copy_failed(w);
            pending[next] = 1;
        }
        if (st == BT_OK)
            st = bt_device_event_wait(w, bufs[now]->event, "a staged collective's copy");
        if (st == BT_OK) st = combine_piece(p, bufs[now]->host, piece_elems(p, k));
        if (st == BT_OK && copy_piece(w, p, &p->out, k, bufs[now], DIR_H2D) != 0)
            st = copy_failed(w);
    }
    for (int i = 0; i < PIPE_BUFS && st == BT_OK; i++)
        if (pending[i]) st = bt_device_event_wait(w, bufs[i]->event, "a staged collective's copy");
    if (st != BT_OK) drain(w, bufs, pending);
    bt_staging_take_back(w, PIPE_BUFS, bufs);
    return st;
}

/* A staged collective of P blocks of `block` elements (elem bytes each),
 * copied in from `in` and out to `out`, run as a pipeline when it can: 1,
 * with its status in *st; 0 when it cannot (no staging pool, or P elements
 * larger than a chunk), and the caller stages the buffer whole. */
static int pipelined(bt_comm *c, int kind, bt_dtype t, bt_op op, size_t elem, size_t block,
                     pipe_side in, pipe_side out, bt_status *st)
{
    pipe_plan p = {.c = c, .kind = kind, .t = t, .op = op, .elem = elem, .block = block};
    p.in = in, p.out = out;
    p.slice = bt_staging_stats_of(c->world).chunk_bytes / ((size_t)c->size * elem);
    if (p.slice > block) p.slice = block;
    if (!c->world->staging || p.slice == 0) return 0;
    *st = run_pipeline(&p);
    return 1;
}

bt_status bt_allreduce_mem(bt_comm *c, void *buf, size_t count, bt_dtype t, bt_op op, bt_mem mem)
{
    bt_status st = bt_collective_check(c, mem);
    if (st != BT_OK) return st;
    if (mem == BT_MEM_HOST) return bt_allreduce(c, buf, count, t, op);
    if (bt_dtype_size(t) == 0 || (count && !buf)) return BT_ERR_ARG;
    if (c->size == 1 || count == 0) return BT_OK;
#ifdef HAVE_NCCL
    if (nccl_covers(c))
        return bt_nccl_collective(c->world->nccl, BT_COLL_ALLREDUCE, buf, buf, count, t, op);
#endif
    size_t elem = bt_dtype_size(t), bytes = count * elem, size = (size_t)c->size;
    size_t block = (count + size - 1) / size;
    pipe_side all = {buf, block * elem, bytes, 0, c->size};
    if (pipelined(c, BT_COLL_ALLREDUCE, t, op, elem, block, all, all, &st)) return st;
    void *host = host_buffer(c, bytes, &st);
    if (host) st = bt_device_copy_wait(c->world, host, buf, bytes, DIR_D2H);
    if (st == BT_OK) st = bt_allreduce(c, host, count, t, op);
    if (st == BT_OK) st = bt_device_copy_wait(c->world, buf, host, bytes, DIR_H2D);
    free(host);
    return st;
}

bt_status bt_iallreduce_mem(bt_comm *c, void *buf, size_t count, bt_dtype t, bt_op op, bt_mem mem,
                            bt_request **req)
{
    if (!req) return BT_ERR_ARG;
    *req = NULL;
#ifdef HAVE_NCCL
    bt_status st = bt_collective_check(c, mem);
    if (st != BT_OK) return st;
    if (mem == BT_MEM_DEVICE && count && buf && bt_dtype_size(t) && nccl_covers(c)) {
        bt_world *w = c->world;
        bt_request *r = bt_calloc(w, sizeof *r, "a collective's request");
        if (!r) return BT_ERR_SYS;
        *r = (bt_request){.world = w,
                          .backend = w->nccl,
                          .kind = BT_REQ_COLLECTIVE,
                          .mem = mem,
                          .world_peer = w->rank,
                          .channel = BT_CHANNEL_RESERVED,
                          .bytes = count * bt_dtype_size(t),
                          .buf = buf};
        st = bt_nccl_collective_start(w->nccl, BT_COLL_ALLREDUCE, buf, buf, count, t, op, r);
        if (st != BT_OK) {
            free(r);
            return st;
        }
        *req = r;
        return BT_OK;
    }
#endif
    return bt_allreduce_mem(c, buf, count, t, op, mem);
}

bt_status bt_reduce_scatter_mem(bt_comm *c, const void *send, void *recv, size_t count_per_rank,
                                bt_dtype t, bt_op op, bt_mem mem)
{
    bt_status st = bt_collective_check(c, mem);
    if (st != BT_OK) return st;
    if (mem == BT_MEM_HOST) return bt_reduce_scatter(c, send, recv, count_per_rank, t, op);
    if (bt_dtype_size(t) == 0 || (count_per_rank && (!send || !recv))) return BT_ERR_ARG;
    if (count_per_rank == 0) return BT_OK;
#ifdef HAVE_NCCL
    if (nccl_covers(c))
        return bt_nccl_collective(c->world->nccl, BT_COLL_REDUCE_SCATTER, send, recv,
                                  count_per_rank, t, op);
#endif
    size_t elem = bt_dtype_size(t), block = count_per_rank * elem, total = block * (size_t)c->size;
    pipe_side in = {(unsigned char *)send, block, total, 0, c->size},
              out = {recv, block, block, 0, 1};
    if (pipelined(c, BT_COLL_REDUCE_SCATTER, t, op, elem, count_per_rank, in, out, &st)) return st;
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
    bt_status st = bt_collective_check(c, mem);
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
    pipe_side in = {(unsigned char *)send, bytes_per_rank, bytes_per_rank, c->rank, 1},
              out = {recv, bytes_per_rank, total, 0, c->size};
    /* bytes, no arithmetic: the type and operation are not used */
    if (pipelined(c, BT_COLL_ALLGATHER, BT_F32, BT_SUM, 1, bytes_per_rank, in, out, &st)) return st;
    unsigned char *host = host_buffer(c, total, &st);
    unsigned char *mine = host ? host + (size_t)c->rank * bytes_per_rank : NULL;
    if (host) st = bt_device_copy_wait(c->world, mine, send, bytes_per_rank, DIR_D2H);
    if (st == BT_OK) st = bt_allgather(c, mine, host, bytes_per_rank);
    if (st == BT_OK) st = bt_device_copy_wait(c->world, recv, host, total, DIR_H2D);
    free(host);
    return st;
}
