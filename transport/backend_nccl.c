/* backend_nccl.c: device buffers between the GPUs of one node through NCCL,
 * when NCCL serves the node (bt_world_set_device: NCCL in the build,
 * transport.intra auto or nccl, device hooks with a GPU id on every local
 * rank, and no two local ranks on one GPU, which NCCL refuses). Device memory
 * only: host buffers between the same ranks go through UCX, so the transport's
 * host collectives never reach NCCL.
 *
 * NCCL has no tags: sends and receives on one communicator match in posting
 * order. To keep channels independent (the attention ring runs K/V, Q-bundle
 * and dQ channels at once) every user channel 0..7 gets its own communicator
 * and CUDA stream; the transport's reserved channels (the all-to-all's
 * grouped sends and receives among them) and the device collectives share
 * one more, so that they run on its stream in the order they are called.
 *
 * Posting: NCCL point-to-point must be grouped where both ends post a receive
 * before a send (a ring step on every rank): outside ncclGroupStart/End each
 * call is its own group, which waits for its peer before the next is issued,
 * and every rank waits. Inside bt_group_start/end the backend opens one NCCL
 * group at its first post and closes it at bt_group_end; a request's CUDA
 * event is recorded on its communicator's stream when its group ends, and the
 * request completes when the event has. Outside a world group each post is
 * its own NCCL group, as before.
 *
 * Creation is collective over the node's ranks and happens in
 * bt_world_set_device, after the engine chose its GPU: local rank 0 draws one
 * unique id per communicator, the ids travel over the host intra-node
 * communicator, and every rank initialises the communicators in the same
 * order on the GPU its hooks name. A failing job aborts the communicators
 * (ncclCommAbort) instead of destroying them, which would wait for peers. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>
#include <nccl.h>

#include "transport/internal.h"

enum { NCCL_USER_CHANNELS = 8, NCCL_COLL = NCCL_USER_CHANNELS, NCCL_COMMS = NCCL_USER_CHANNELS + 1 };

typedef struct {
    ncclComm_t comms[NCCL_COMMS];
    cudaStream_t streams[NCCL_COMMS];
    int device;
    int group_open;        /* ncclGroupStart issued for the world's open group */
    bt_request **grouped;  /* requests posted in it: their events come at its end */
    int n_grouped, cap_grouped;
} nccl_state;

static int comm_index(int channel)
{
    if (channel < NCCL_USER_CHANNELS) return channel;
    if (channel >= BT_CHANNEL_RESERVED && channel < BT_MAX_CHANNELS) return NCCL_COLL;
    return -1;
}

static bt_status nccl_error(bt_world *w, const char *what, ncclResult_t nr)
{
    return bt_fail(w, BT_ERR_SYS, "NCCL %s failed: %s", what, ncclGetErrorString(nr));
}

static bt_status cuda_error(bt_world *w, const char *what, cudaError_t ce)
{
    return bt_fail(w, BT_ERR_SYS, "CUDA %s failed: %s", what, cudaGetErrorString(ce));
}

int bt_nccl_device_key(int device_id, char *key, size_t key_len)
{
    return cudaDeviceGetPCIBusId(key, (int)key_len, device_id) == cudaSuccess ? 0 : -1;
}

/* The request's completion event, recorded on its communicator's stream. */
static bt_status record_event(bt_backend *b, bt_request *req)
{
    nccl_state *s = b->impl;
    cudaEvent_t ev;
    cudaError_t ce = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
    if (ce != cudaSuccess) return cuda_error(b->world, "event creation", ce);
    ce = cudaEventRecord(ev, s->streams[comm_index(req->channel)]);
    if (ce != cudaSuccess) {
        cudaEventDestroy(ev);
        return cuda_error(b->world, "event record", ce);
    }
    req->impl = ev;
    return BT_OK;
}

static bt_status remember_grouped(bt_backend *b, bt_request *req)
{
    nccl_state *s = b->impl;
    if (s->n_grouped == s->cap_grouped) {
        int cap = s->cap_grouped ? 2 * s->cap_grouped : 16;
        bt_request **grown = realloc(s->grouped, (size_t)cap * sizeof *grown);
        if (!grown) return bt_fail(b->world, BT_ERR_SYS, "out of memory for an NCCL group");
        s->grouped = grown, s->cap_grouped = cap;
    }
    s->grouped[s->n_grouped++] = req;
    return BT_OK;
}

static bt_status post(bt_backend *b, bt_request *req, void *buf, int sending)
{
    nccl_state *s = b->impl;
    bt_world *w = b->world;
    int ci = comm_index(req->channel);
    if (ci < 0)
        return bt_fail(w, BT_ERR_ARG, "the nccl transport to rank %d carries channels 0..%d and "
                       "%d..%d, not channel %d", req->world_peer, NCCL_USER_CHANNELS - 1,
                       BT_CHANNEL_RESERVED, BT_MAX_CHANNELS - 1, req->channel);
    int grouped = w->in_group;
    if (!grouped || !s->group_open) {
        ncclResult_t nr = ncclGroupStart();
        if (nr != ncclSuccess) return nccl_error(w, "group start", nr);
        s->group_open = grouped;
    }
    int peer = w->peers[req->world_peer].local_rank;
    ncclResult_t nr = sending ? ncclSend(buf, req->bytes, ncclUint8, peer, s->comms[ci], s->streams[ci])
                              : ncclRecv(buf, req->bytes, ncclUint8, peer, s->comms[ci], s->streams[ci]);
    if (nr != ncclSuccess) return nccl_error(w, sending ? "send" : "receive", nr);
    if (grouped) return remember_grouped(b, req);
    nr = ncclGroupEnd();
    if (nr != ncclSuccess) return nccl_error(w, "group end", nr);
    return record_event(b, req);
}

static bt_status nccl_isend(bt_backend *b, bt_request *req, const void *buf)
{
    return post(b, req, (void *)buf, 1);
}

static bt_status nccl_irecv(bt_backend *b, bt_request *req) { return post(b, req, req->buf, 0); }

/* Issues the open group; its requests get their events. */
static bt_status nccl_group_end(bt_backend *b)
{
    nccl_state *s = b->impl;
    if (!s->group_open) return BT_OK;
    s->group_open = 0;
    ncclResult_t nr = ncclGroupEnd();
    bt_status st = nr == ncclSuccess ? BT_OK : nccl_error(b->world, "group end", nr);
    for (int i = 0; i < s->n_grouped; i++) {
        bt_request *req = s->grouped[i];
        bt_status rst = st == BT_OK ? record_event(b, req) : st;
        if (rst != BT_OK) {
            req->done = 1;
            req->status = rst;
            if (st == BT_OK) st = rst;
        }
    }
    s->n_grouped = 0;
    return st;
}

/* An NCCL error that happened asynchronously (a peer failed) on comm ci. */
static bt_status async_error(bt_backend *b, int ci)
{
    nccl_state *s = b->impl;
    ncclResult_t ar = ncclSuccess;
    if (ncclCommGetAsyncError(s->comms[ci], &ar) != ncclSuccess) return BT_OK;
    return ar == ncclSuccess || ar == ncclInProgress ? BT_OK : nccl_error(b->world, "communication", ar);
}

static void nccl_test(bt_backend *b, bt_request *req)
{
    if (!req->impl) return; /* its group has not ended */
    cudaError_t ce = cudaEventQuery((cudaEvent_t)req->impl);
    if (ce == cudaErrorNotReady) {
        bt_status st = async_error(b, comm_index(req->channel));
        if (st == BT_OK) return;
        req->status = st;
    } else {
        req->status = ce == cudaSuccess ? BT_OK : cuda_error(b->world, "transfer", ce);
    }
    cudaEventDestroy((cudaEvent_t)req->impl);
    req->impl = NULL;
    req->done = 1;
}

static void nccl_cancel(bt_backend *b, bt_request *req)
{
    nccl_state *s = b->impl;
    /* NCCL cannot withdraw a posted operation; the job is failing and the
     * communicators are aborted in finalize, which releases it. */
    for (int i = 0; i < s->n_grouped; i++)
        if (s->grouped[i] == req) s->grouped[i] = s->grouped[--s->n_grouped];
    if (req->impl) cudaEventDestroy((cudaEvent_t)req->impl);
    req->impl = NULL;
}

static void nccl_progress(bt_backend *b) { (void)b; }

static bt_status nccl_flush(bt_backend *b)
{
    nccl_state *s = b->impl;
    for (int i = 0; i < NCCL_COMMS; i++) {
        cudaError_t ce = cudaStreamSynchronize(s->streams[i]);
        if (ce != cudaSuccess) return cuda_error(b->world, "stream synchronize", ce);
    }
    return BT_OK;
}

static void nccl_finalize(bt_backend *b)
{
    nccl_state *s = b->impl;
    int failing = atomic_load(&b->world->failed) != 0;
    if (s->group_open) ncclGroupEnd();
    for (int i = 0; i < NCCL_COMMS; i++) {
        if (s->comms[i]) {
            if (failing)
                ncclCommAbort(s->comms[i]);
            else
                ncclCommDestroy(s->comms[i]);
        }
        if (s->streams[i]) cudaStreamDestroy(s->streams[i]);
    }
    free(s->grouped);
    free(s);
    free(b);
}

static const bt_backend_ops nccl_ops = {
    .name = "nccl",
    .mem_kinds = BT_MEM_BIT(BT_MEM_DEVICE),
    .isend = nccl_isend,
    .irecv = nccl_irecv,
    .test = nccl_test,
    .cancel = nccl_cancel,
    .progress = nccl_progress,
    .flush = nccl_flush,
    .finalize = nccl_finalize,
    .group_end = nccl_group_end,
};

/* ------------------------------------------------------------------ collectives */

static ncclDataType_t nccl_type(bt_dtype t)
{
    return t == BT_F32 ? ncclFloat32 : t == BT_F64 ? ncclFloat64 : ncclInt64;
}

static ncclRedOp_t nccl_op(bt_op op) { return op == BT_SUM ? ncclSum : op == BT_MAX ? ncclMax : ncclMin; }

typedef struct {
    bt_backend *b;
    cudaEvent_t ev;
} collective_poll;

/* The collective's event is done; NCCL's asynchronous errors (a peer failed)
 * end the wait too. */
static int collective_done(void *arg, bt_status *st)
{
    collective_poll *p = arg;
    cudaError_t ce = cudaEventQuery(p->ev);
    if (ce == cudaSuccess) return 1;
    *st = ce != cudaErrorNotReady ? cuda_error(p->b->world, "collective", ce)
                                  : async_error(p->b, NCCL_COLL);
    return 0;
}

/* Queues the collective on NCCL's stream. */
static bt_status issue_collective(bt_backend *b, int kind, const void *send, void *recv,
                                  size_t count, bt_dtype t, bt_op op)
{
    nccl_state *s = b->impl;
    ncclComm_t comm = s->comms[NCCL_COLL];
    cudaStream_t stream = s->streams[NCCL_COLL];
    ncclResult_t nr =
        kind == BT_COLL_ALLREDUCE
            ? ncclAllReduce(send, recv, count, nccl_type(t), nccl_op(op), comm, stream)
        : kind == BT_COLL_REDUCE_SCATTER
            ? ncclReduceScatter(send, recv, count, nccl_type(t), nccl_op(op), comm, stream)
            : ncclAllGather(send, recv, count, ncclUint8, comm, stream);
    return nr == ncclSuccess ? BT_OK : nccl_error(b->world, "collective", nr);
}

bt_status bt_nccl_collective(bt_backend *b, int kind, const void *send, void *recv, size_t count,
                             bt_dtype t, bt_op op)
{
    nccl_state *s = b->impl;
    bt_status st = issue_collective(b, kind, send, recv, count, t, op);
    if (st != BT_OK) return st;
    cudaEvent_t ev;
    cudaError_t ce = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
    if (ce != cudaSuccess) return cuda_error(b->world, "event creation", ce);
    ce = cudaEventRecord(ev, s->streams[NCCL_COLL]);
    collective_poll poll = {b, ev};
    st = ce == cudaSuccess ? bt_poll_wait(b->world, collective_done, &poll, "an NCCL collective")
                           : cuda_error(b->world, "event record", ce);
    cudaEventDestroy(ev);
    return st;
}

bt_status bt_nccl_collective_start(bt_backend *b, int kind, const void *send, void *recv,
                                   size_t count, bt_dtype t, bt_op op, bt_request *req)
{
    if (comm_index(req->channel) != NCCL_COLL) return BT_ERR_ARG;
    bt_status st = issue_collective(b, kind, send, recv, count, t, op);
    return st == BT_OK ? record_event(b, req) : st;
}

/* ------------------------------------------------------------------ creation */

static bt_status init_comms(bt_world *w, nccl_state *s)
{
    /* The node's local rank 0 draws the ids; the intra-node group shares them
     * over the host transport before any device traffic. */
    ncclUniqueId ids[NCCL_COMMS];
    memset(ids, 0, sizeof ids);
    bt_status st = BT_OK;
    for (int i = 0; st == BT_OK && w->local_rank == 0 && i < NCCL_COMMS; i++) {
        ncclResult_t nr = ncclGetUniqueId(&ids[i]);
        if (nr != ncclSuccess) st = nccl_error(w, "unique id", nr);
    }
    if (st == BT_OK) st = bt_bcast(w->intra_comm, ids, sizeof ids, 0);
    for (int i = 0; st == BT_OK && i < NCCL_COMMS; i++) {
        ncclResult_t nr = ncclCommInitRank(&s->comms[i], w->local_size, ids[i], w->local_rank);
        if (nr != ncclSuccess) st = nccl_error(w, "communicator initialisation", nr);
        cudaError_t ce = st == BT_OK ? cudaStreamCreateWithFlags(&s->streams[i], cudaStreamNonBlocking)
                                     : cudaSuccess;
        if (ce != cudaSuccess) st = cuda_error(w, "stream creation", ce);
    }
    return st;
}

bt_status bt_backend_nccl_create(bt_world *w, int device_id, bt_backend **out)
{
    *out = NULL;
    nccl_state *s = calloc(1, sizeof *s);
    bt_backend *b = calloc(1, sizeof *b);
    if (!s || !b) {
        free(s), free(b);
        return bt_fail(w, BT_ERR_SYS, "out of memory for the NCCL backend");
    }
    b->ops = &nccl_ops;
    b->world = w;
    b->impl = s;
    s->device = device_id;
    cudaError_t ce = cudaSetDevice(device_id);
    bt_status st = ce == cudaSuccess ? BT_OK : cuda_error(w, "set device", ce);
    if (st == BT_OK) st = init_comms(w, s);
    if (st != BT_OK) {
        nccl_finalize(b);
        return st;
    }
    *out = b;
    return BT_OK;
}
