/* transport.h: moving bytes between ranks, and nothing else.
 *
 * A world is this process's view of the job: its identity, the backends that
 * reach its peers, and the control plane that notices a lost rank. Communicators
 * are ordered subsets of the world (the world itself, intra-node, inter-node,
 * data- and context-parallel groups). Point-to-point messages are addressed by
 * (communicator, peer, channel): messages on different channels or different
 * communicators are never matched against each other, and messages on one
 * channel between one pair of ranks arrive in the order they were posted.
 *
 * Every call returns a bt_status. On failure the world keeps a message that
 * names what went wrong (which rank was lost, what a wait was waiting for);
 * bt_world_error() returns it. A lost peer or a timeout is sticky: every later
 * call fails with the same status, so a rank never hangs after an error. */
#ifndef BURST_TRANSPORT_H
#define BURST_TRANSPORT_H

#include <stddef.h>
#include <stdint.h>

typedef enum {
    BT_OK = 0,
    BT_ERR_ARG,       /* a bad argument: NULL buffer, peer out of range, ... */
    BT_ERR_CONFIG,    /* a bad setting or launch environment, found before work */
    BT_ERR_SYS,       /* a system call or library failed */
    BT_ERR_PEER_LOST, /* a rank died or closed its connection */
    BT_ERR_TIMEOUT,   /* a peer did not answer within the timeout */
    BT_ERR_AUTH,      /* a peer did not present the job's secret */
} bt_status;

const char *bt_status_name(bt_status st);

/* Returns call's status from the calling function unless it is BT_OK (as
 * NCCL's NCCLCHECK does): for a chain of calls with nothing to undo when one
 * fails. */
#define BT_CHECK(call)                                                                             \
    do {                                                                                           \
        bt_status bt_check_status_ = (call);                                                       \
        if (bt_check_status_ != BT_OK) return bt_check_status_;                                    \
    } while (0)

/* Channels: independent message streams between each pair of ranks. Channels
 * at and above BT_CHANNEL_RESERVED belong to the transport's collectives: 60-63
 * the barrier, broadcast, all-gather and reduce-scatter (collectives.c),
 * BT_CHANNEL_ALLTOALL (64) the all-to-all (alltoall.c). Channels stay below
 * 128: a message's tag keeps 8 bits of its channel, the top one marking staged
 * device chunks (internal.h). */
enum {
    BT_CHANNEL_RESERVED = 60,
    BT_CHANNEL_ALLTOALL = BT_CHANNEL_RESERVED + 4,
    BT_MAX_CHANNELS = BT_CHANNEL_ALLTOALL + 1
};

typedef struct bt_world bt_world;
typedef struct bt_comm bt_comm;
typedef struct bt_request bt_request;

typedef struct {
    const char *intra;  /* "auto" | "ucx" | "nccl": backend between ranks of one node */
    const char *inter;  /* "ucx": backend between nodes */
    double timeout_s;   /* a peer silent this long is declared lost (default 60) */
    int verbose;        /* print wire-up details on stderr */
} bt_options;

void bt_options_default(bt_options *opt);

/* Identity and wire-up: PMIx, then Slurm's environment, then the variables of
 * `burst run`, then a world of one. Collective over the world. */
bt_status bt_world_init(const bt_options *opt, bt_world **out, char *err, size_t err_len);
/* Collective: waits until every rank has called it, then tears down. */
bt_status bt_world_finalize(bt_world *w);
/* Tears down at once, after an error; peers learn this rank is gone. */
void bt_world_abort(bt_world *w);

int bt_world_rank(const bt_world *w);
int bt_world_size(const bt_world *w);
int bt_world_node(const bt_world *w);       /* node index, 0..n_nodes-1, node-major */
int bt_world_n_nodes(const bt_world *w);
int bt_world_local_rank(const bt_world *w); /* rank within the node */
int bt_world_local_size(const bt_world *w); /* ranks on this node (-1 if nodes differ) */
const char *bt_world_bootstrap(const bt_world *w); /* "pmix", "slurm", "burst-run", "single" */
const char *bt_world_error(const bt_world *w);
bt_comm *bt_world_comm(bt_world *w);

/* Sub-communicators (collective over the parent). Ranks of the new group are
 * ordered by (key, parent rank). A rank passing color < 0 gets NULL. */
bt_status bt_comm_split(bt_comm *parent, int color, int key, bt_comm **out);
bt_status bt_comm_intra_node(bt_world *w, bt_comm **out); /* ranks of my node */
bt_status bt_comm_inter_node(bt_world *w, bt_comm **out); /* my local index on every node */
/* Data-parallel x context-parallel grid over the world, node-major: CP groups are
 * runs of cp consecutive world ranks; DP groups take one rank of each. */
bt_status bt_comm_grid(bt_world *w, int dp, int cp, bt_comm **dp_comm, bt_comm **cp_comm);
void bt_comm_free(bt_comm *c);

int bt_comm_rank(const bt_comm *c);
int bt_comm_size(const bt_comm *c);
int bt_comm_world_rank(const bt_comm *c, int rank); /* world rank of a member */
bt_world *bt_comm_world(bt_comm *c);

/* Non-blocking point-to-point on host memory (device memory: bt_isend_mem
 * below). A receive must be posted with the exact size of the matching send; a
 * size mismatch is an error. */
bt_status bt_isend(bt_comm *c, int peer, int channel, const void *buf, size_t bytes,
                   bt_request **req);
bt_status bt_irecv(bt_comm *c, int peer, int channel, void *buf, size_t bytes,
                   bt_request **req);
/* Completes (and frees) the request when done; *done tells which. */
bt_status bt_test(bt_request **req, int *done);
bt_status bt_wait(bt_request **req);
bt_status bt_waitall(int n, bt_request **reqs);
/* Makes progress on every outstanding transfer and watches for lost peers. */
bt_status bt_progress(bt_world *w);
/* What carries host memory from this rank to world rank peer, into out[len]:
 * the backend and what it chose, e.g. "ucx: sysv/memory cma/memory" on a
 * node or "ucx: tcp/eth0" between nodes (doc/TRANSPORT.md); connects to peer
 * if it was not yet. */
bt_status bt_world_wires(bt_world *w, int peer, char *out, size_t len);

/* ------------------------------------------------------------------ device memory
 * Buffers of point-to-point messages and collectives may live in host or in
 * device (GPU) memory. The transport links no kernels: the engine tells it how
 * to copy device memory with a table of hooks (filled from kernels/device.h),
 * and each pair of ranks gets a path for device buffers (doc/TRANSPORT.md):
 * NCCL inside a node when every local rank drives its own GPU, UCX directly
 * when UCX supports CUDA memory, else staged through pinned host buffers; a
 * rank's messages to itself are copied. Host buffers always travel through
 * UCX (or the self backend), so the host collectives never touch NCCL. A
 * buffer of a kind its path cannot take is refused with BT_ERR_ARG and a
 * message naming the backend, the peer and the memory kind. */
typedef enum { BT_MEM_HOST = 0, BT_MEM_DEVICE = 1 } bt_mem; /* where a buffer lives */

/* How the transport copies device memory it must stage or copy itself. The
 * engine fills it from kernels/device.h (the transport links no kernels; tests
 * fill it from the emulator). Every function returns 0 on success. stream and
 * event are opaque handles of that runtime (cudaStream_t, cudaEvent_t). */
typedef struct {
    const char *name;  /* "cuda", "emulator" */
    int device_id;     /* the GPU this rank drives (NCCL needs it), -1 if none */
    int (*host_alloc)(size_t bytes, void **p); /* page-locked host memory */
    int (*host_free)(void *p);
    int (*stream_create)(void **s);
    int (*stream_destroy)(void *s);
    int (*event_create)(void **e);
    int (*event_destroy)(void *e);
    int (*event_record)(void *e, void *stream);
    int (*event_query)(void *e); /* 1 done, 0 pending, <0 error */
    /* queued on stream; dir: 0 host to device, 1 device to host, 2 device to
     * device. The host side is page-locked (host_alloc): a queued copy of
     * pageable memory runs synchronously on a GPU, overlapping nothing. */
    int (*copy_async)(void *stream, void *dst, const void *src, size_t bytes, int dir);
    /* the same, returning once the copy is done; the host side may be pageable */
    int (*copy)(void *stream, void *dst, const void *src, size_t bytes, int dir);
    /* what the runtime said about the last call that failed (for the
     * transport's error message), or NULL */
    const char *(*last_error)(void);
} bt_device_hooks;

/* Tells the world how to reach device memory, before any BT_MEM_DEVICE call.
 * Collective over the world, once: the ranks agree here on the path of every
 * pair, the staging chunk size (BURST_STAGE_CHUNK must be equal everywhere) and
 * whether NCCL serves their node, and create the NCCL communicators if it does
 * (so the engine calls it after choosing its GPU). hooks may be NULL on a rank
 * without a device: device buffers to or from it are then refused. The hooks
 * are copied; the functions must stay valid until bt_world_finalize. With
 * transport.intra = nccl, a node whose ranks cannot use NCCL is a
 * BT_ERR_CONFIG here. */
bt_status bt_world_set_device(bt_world *w, const bt_device_hooks *hooks);

/* Takes now, once the device is set, the page-locked host buffers that
 * `messages` staged device messages in flight at once need (BURST_STAGE_SLOTS
 * buffers of BURST_STAGE_CHUNK bytes each, one pool for every staged peer and
 * both directions), so that no page-locked allocation, slow and synchronising
 * the device, happens while they travel (inside a training step). The pool
 * then holds at least that many buffers; a message that still finds none
 * free takes one more, which the pool keeps. Not collective; nothing to do
 * (BT_OK) when no peer is staged; BT_ERR_ARG before bt_world_set_device. */
bt_status bt_staging_reserve(bt_world *w, int messages);
/* What the staging pool took, for reports and tests; all 0 when no peer is
 * staged. */
typedef struct {
    size_t chunk_bytes; /* each buffer's size (BURST_STAGE_CHUNK) */
    int slots;          /* buffers a message uses at most (BURST_STAGE_SLOTS) */
    int reserved;       /* buffers taken by bt_staging_reserve */
    int grown;          /* buffers taken later by a message or a collective that found none
                           free */
    int peak_in_use;    /* the most buffers in use at once */
} bt_staging_stats;
bt_staging_stats bt_staging_stats_of(const bt_world *w);

/* Point-to-point on memory of the given kind. For BT_MEM_DEVICE the buffer's
 * content must be complete when the send is posted (the caller has
 * synchronized the stream that wrote it), and a received buffer is complete on
 * the device when its request completes. Both ends of a message name the same
 * kind (a staged device message travels in chunks that a host receive does
 * not match). bt_isend/bt_irecv are these with BT_MEM_HOST. */
bt_status bt_isend_mem(bt_comm *c, int peer, int channel, const void *buf, size_t bytes,
                       bt_mem mem, bt_request **req);
bt_status bt_irecv_mem(bt_comm *c, int peer, int channel, void *buf, size_t bytes, bt_mem mem,
                       bt_request **req);

/* Posts between start and end are issued together at end: NCCL needs a ring
 * step's sends and receives in one group (posting them one by one while every
 * rank receives before sending deadlocks). Other backends post at once. Not
 * nested (BT_ERR_ARG); requests posted in a group complete only after its end;
 * no collective may run inside a group. */
bt_status bt_group_start(bt_world *w);
bt_status bt_group_end(bt_world *w);

/* How device buffers travel to peer: "nccl", "direct" (UCX with CUDA memory
 * support), "staged" (pinned host buffers), "copy" (the rank itself); NULL
 * when no device hooks are set (on either end). */
const char *bt_comm_device_path(bt_comm *c, int peer);
/* Collective over the world, after bt_world_set_device: the path of every
 * pair, row r the paths from rank r to each rank, one letter each (c copy,
 * n nccl, d direct, s staged, - none), into table [size * size] on every
 * rank; for rank 0 to print at start. */
bt_status bt_world_device_path_table(bt_world *w, char *table);

/* NCCL's own device memory on one rank of a node of local_ranks ranks that
 * NCCL serves (0 below 2 ranks), estimated from NCCL's documented settings,
 * read from the environment as NCCL reads them, else their defaults: each
 * channel of the collectives' communicator receives through one buffer per
 * protocol (Simple NCCL_BUFFSIZE 4 MiB, LL 512 KiB, LL128 4,915,200 bytes;
 * NCCL_MAX_NCHANNELS channels, at most and by default 32); each of p2p_comms
 * point-to-point communicators receives from 2 peers (1 with 2 ranks) on 2
 * channels each (an assumption: NCCL derives it from the topology) in
 * Simple buffers. NCCL allocates these itself, outside the caller's memory,
 * when a connection is first used. basis [basis_len] gets the figures. */
size_t bt_nccl_buffer_bytes(int local_ranks, int p2p_comms, char *basis, size_t basis_len);

/* Byte counters, per channel, of everything this rank sent and received since
 * the start or the last reset (collectives count on their reserved channels). */
typedef struct {
    uint64_t sent_bytes, recv_bytes;
    uint64_t sent_msgs, recv_msgs;
} bt_counter;
bt_counter bt_counter_get(const bt_world *w, int channel);
bt_counter bt_counter_total(const bt_world *w);
void bt_counter_reset(bt_world *w);

/* Collectives, on any communicator, blocking. */
typedef enum { BT_F32, BT_F64, BT_I64 } bt_dtype;
typedef enum { BT_SUM, BT_MAX, BT_MIN } bt_op;
size_t bt_dtype_size(bt_dtype t);

bt_status bt_barrier(bt_comm *c);
bt_status bt_bcast(bt_comm *c, void *buf, size_t bytes, int root);
/* In place: buf holds count elements on every rank. */
bt_status bt_allreduce(bt_comm *c, void *buf, size_t count, bt_dtype t, bt_op op);
/* send holds count_per_rank * size elements; recv gets this rank's reduced block. */
bt_status bt_reduce_scatter(bt_comm *c, const void *send, void *recv, size_t count_per_rank,
                            bt_dtype t, bt_op op);
/* The bytes bt_reduce_scatter allocates while it runs on a communicator of size
 * ranks (a copy of send and one incoming block), for memory estimates. */
size_t bt_reduce_scatter_bytes(int size, size_t count_per_rank, bt_dtype t);
/* The bytes bt_allreduce allocates while it runs on size ranks (the buffer
 * padded to whole blocks, and the reduce-scatter's incoming block). */
size_t bt_allreduce_bytes(int size, size_t count, bt_dtype t);
/* send holds bytes_per_rank; recv gets size * bytes_per_rank, in rank order. */
bt_status bt_allgather(bt_comm *c, const void *send, void *recv, size_t bytes_per_rank);
/* The same on memory of the given kind (blocking). Device buffers go through
 * NCCL when the communicator is exactly its node's ranks and NCCL serves the
 * node; otherwise they are copied to host memory, reduced or gathered by the
 * host collectives above, and copied back: piece by piece through the staging
 * pool's buffers, each piece's copies overlapping the others' wire, with the
 * results of the whole buffer's host collective to the bit. */
bt_status bt_allreduce_mem(bt_comm *c, void *buf, size_t count, bt_dtype t, bt_op op, bt_mem mem);
/* bt_allreduce_mem, not waited for: where NCCL carries it, queued on NCCL's
 * stream, *req completing (bt_test, bt_wait) once buf holds the sum on the
 * device, so that the caller queues other work meanwhile; on every other
 * path it runs whole before returning and *req is NULL. buf must be complete
 * when it is called (as for a blocking collective), and the caller leaves it
 * alone, on the host and on the device, until *req completed. Collectives
 * (blocking or not) on one communicator run in the order they are called. */
bt_status bt_iallreduce_mem(bt_comm *c, void *buf, size_t count, bt_dtype t, bt_op op, bt_mem mem,
                            bt_request **req);
bt_status bt_reduce_scatter_mem(bt_comm *c, const void *send, void *recv, size_t count_per_rank,
                                bt_dtype t, bt_op op, bt_mem mem);
bt_status bt_allgather_mem(bt_comm *c, const void *send, void *recv, size_t bytes_per_rank,
                           bt_mem mem);
/* All-to-all over c on memory of kind mem, blocking: for every pair (i, j) of
 * members, rank i's send_bytes[j] bytes at send + send_off[j] arrive at rank
 * j's recv + recv_off[i], where rank j gives recv_bytes[i] equal to rank i's
 * send_bytes[j] (a mismatch is an error, as for point-to-point). The four
 * arrays hold c's size entries each, in bytes, indexed by member of c; send
 * and recv may be NULL when every block of theirs is empty. Blocks may be
 * empty; the receive blocks must not overlap each other or any send block
 * (BT_ERR_ARG, the world not failed, as for a call inside a group; send
 * blocks may overlap each other). Every member calls it, in the same order
 * relative to c's other collectives. It runs as one group
 * (bt_group_start) of a receive from and a send to every member on channel
 * BT_CHANNEL_ALLTOALL, counted there: device buffers through NCCL on the
 * collectives' stream to the peers of this node that NCCL serves, staged
 * (each message taking staging buffers as any does: bt_staging_reserve) or
 * direct to the others; the block to itself copied. Device memory: send is
 * complete when it is called, and recv complete on the device when it
 * returns. */
bt_status bt_alltoallv_mem(bt_comm *c, const void *send, const size_t *send_bytes,
                           const size_t *send_off, void *recv, const size_t *recv_bytes,
                           const size_t *recv_off, bt_mem mem);
/* The same with equal blocks: block j of send (bytes_per_rank bytes at
 * j * bytes_per_rank) to member j, member i's block into recv +
 * i * bytes_per_rank (send and recv hold size * bytes_per_rank bytes each and
 * must not overlap). */
bt_status bt_alltoall_mem(bt_comm *c, const void *send, void *recv, size_t bytes_per_rank,
                          bt_mem mem);
/* Two-level all-reduce over the world: reduce-scatter inside each node, all-reduce
 * of each shard across nodes (all NICs busy at once), all-gather inside the node. */
bt_status bt_allreduce_hier(bt_world *w, void *buf, size_t count, bt_dtype t, bt_op op);

#endif
