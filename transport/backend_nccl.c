/* backend_nccl.c: point-to-point between the GPUs of one node through NCCL,
 * on device memory, for transport.intra = nccl. NCCL has no tags: messages on
 * one communicator match in posting order. To keep channels independent (the
 * attention ring runs K/V, Q-bundle and dQ channels at once) every user channel
 * gets its own NCCL communicator and CUDA stream; the transport's collectives,
 * which are blocking and posted in the same order everywhere, share one more.
 * Completion is observed with a CUDA event per request.
 *
 * Buffers sent to ranks of the same node must be device memory; traffic to
 * other nodes still goes through UCX on host memory. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>
#include <nccl.h>

#include "transport/internal.h"

enum { NCCL_USER_CHANNELS = 8, NCCL_COMMS = NCCL_USER_CHANNELS + 1 };

typedef struct {
    ncclComm_t comms[NCCL_COMMS];
    cudaStream_t streams[NCCL_COMMS];
    int device;
} nccl_state;

static int comm_index(int channel)
{
    if (channel < NCCL_USER_CHANNELS) return channel;
    if (channel >= BT_CHANNEL_RESERVED) return NCCL_USER_CHANNELS;
    return -1;
}

static bt_status post(bt_backend *b, bt_request *req, void *buf, int sending)
{
    nccl_state *s = b->impl;
    int ci = comm_index(req->channel);
    if (ci < 0)
        return bt_fail(b->world, BT_ERR_CONFIG,
                       "the NCCL transport carries channels 0..%d, not channel %d",
                       NCCL_USER_CHANNELS - 1, req->channel);
    int peer = b->world->peers[req->world_peer].local_rank;
    ncclResult_t nr = sending ? ncclSend(buf, req->bytes, ncclUint8, peer, s->comms[ci], s->streams[ci])
                              : ncclRecv(buf, req->bytes, ncclUint8, peer, s->comms[ci], s->streams[ci]);
    if (nr != ncclSuccess)
        return bt_fail(b->world, BT_ERR_SYS, "NCCL %s failed: %s", sending ? "send" : "receive",
                       ncclGetErrorString(nr));
    cudaEvent_t ev;
    cudaError_t ce = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
    if (ce == cudaSuccess) ce = cudaEventRecord(ev, s->streams[ci]);
    if (ce != cudaSuccess)
        return bt_fail(b->world, BT_ERR_SYS, "CUDA event: %s", cudaGetErrorString(ce));
    req->impl = ev;
    return BT_OK;
}

static bt_status nccl_isend(bt_backend *b, bt_request *req, const void *buf)
{
    return post(b, req, (void *)buf, 1);
}

static bt_status nccl_irecv(bt_backend *b, bt_request *req) { return post(b, req, req->buf, 0); }

static void nccl_test(bt_backend *b, bt_request *req)
{
    cudaError_t ce = cudaEventQuery((cudaEvent_t)req->impl);
    if (ce == cudaErrorNotReady) return;
    cudaEventDestroy((cudaEvent_t)req->impl);
    req->impl = NULL;
    req->done = 1;
    req->status = ce == cudaSuccess
                      ? BT_OK
                      : bt_fail(b->world, BT_ERR_SYS, "CUDA: %s", cudaGetErrorString(ce));
}

static void nccl_cancel(bt_backend *b, bt_request *req)
{
    (void)b;
    /* NCCL cannot withdraw a posted operation; the job is failing and the
     * communicators are aborted in finalize, which releases it. */
    if (req->impl) cudaEventDestroy((cudaEvent_t)req->impl);
    req->impl = NULL;
}

static void nccl_progress(bt_backend *b) { (void)b; }

static bt_status nccl_flush(bt_backend *b)
{
    nccl_state *s = b->impl;
    for (int i = 0; i < NCCL_COMMS; i++) {
        cudaError_t ce = cudaStreamSynchronize(s->streams[i]);
        if (ce != cudaSuccess)
            return bt_fail(b->world, BT_ERR_SYS, "CUDA: %s", cudaGetErrorString(ce));
    }
    return BT_OK;
}

static void nccl_finalize(bt_backend *b)
{
    nccl_state *s = b->impl;
    int failing = atomic_load(&b->world->failed) != 0;
    for (int i = 0; i < NCCL_COMMS; i++) {
        if (s->comms[i]) {
            if (failing)
                ncclCommAbort(s->comms[i]);
            else
                ncclCommDestroy(s->comms[i]);
        }
        if (s->streams[i]) cudaStreamDestroy(s->streams[i]);
    }
    free(s);
    free(b);
}

static const bt_backend_ops nccl_ops = {
    .name = "nccl",
    .isend = nccl_isend,
    .irecv = nccl_irecv,
    .test = nccl_test,
    .cancel = nccl_cancel,
    .progress = nccl_progress,
    .flush = nccl_flush,
    .finalize = nccl_finalize,
};

bt_status bt_backend_nccl_create(bt_world *w, bt_backend **out)
{
    *out = NULL;
    if (w->local_size < 1)
        return bt_fail(w, BT_ERR_CONFIG, "transport.intra = nccl needs the same number of ranks "
                                         "on every node");
    int n_dev = 0;
    cudaError_t ce = cudaGetDeviceCount(&n_dev);
    if (ce != cudaSuccess || n_dev == 0)
        return bt_fail(w, BT_ERR_CONFIG, "transport.intra = nccl, but no CUDA device is visible (%s)",
                       ce != cudaSuccess ? cudaGetErrorString(ce) : "0 devices");
    nccl_state *s = calloc(1, sizeof *s);
    s->device = w->local_rank % n_dev;
    cudaSetDevice(s->device);

    /* The node's local rank 0 draws the ids; the intra-node group shares them
     * over the host transport before any device traffic. */
    ncclUniqueId ids[NCCL_COMMS];
    memset(ids, 0, sizeof ids);
    bt_status st = BT_OK;
    if (!w->intra_comm) st = bt_comm_intra_node(w, &w->intra_comm);
    for (int i = 0; st == BT_OK && w->local_rank == 0 && i < NCCL_COMMS; i++)
        if (ncclGetUniqueId(&ids[i]) != ncclSuccess)
            st = bt_fail(w, BT_ERR_SYS, "ncclGetUniqueId failed");
    if (st == BT_OK) st = bt_bcast(w->intra_comm, ids, sizeof ids, 0);
    for (int i = 0; st == BT_OK && i < NCCL_COMMS; i++) {
        ncclResult_t nr = ncclCommInitRank(&s->comms[i], w->local_size, ids[i], w->local_rank);
        if (nr != ncclSuccess)
            st = bt_fail(w, BT_ERR_SYS, "ncclCommInitRank failed: %s", ncclGetErrorString(nr));
        else if (cudaStreamCreateWithFlags(&s->streams[i], cudaStreamNonBlocking) != cudaSuccess)
            st = bt_fail(w, BT_ERR_SYS, "cannot create a CUDA stream");
    }
    bt_backend *b = calloc(1, sizeof *b);
    b->ops = &nccl_ops;
    b->world = w;
    b->impl = s;
    if (st != BT_OK) {
        nccl_finalize(b);
        return st;
    }
    *out = b;
    return BT_OK;
}
