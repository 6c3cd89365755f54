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

/* Channels: independent message streams between each pair of ranks. Channels
 * at and above BT_CHANNEL_RESERVED belong to the transport's collectives. */
enum { BT_MAX_CHANNELS = 64, BT_CHANNEL_RESERVED = 60 };

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

/* Non-blocking point-to-point on host memory. A receive must be posted with the
 * exact size of the matching send; a size mismatch is an error. */
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
/* send holds bytes_per_rank; recv gets size * bytes_per_rank, in rank order. */
bt_status bt_allgather(bt_comm *c, const void *send, void *recv, size_t bytes_per_rank);
/* Two-level all-reduce over the world: reduce-scatter inside each node, all-reduce
 * of each shard across nodes (all NICs busy at once), all-gather inside the node. */
bt_status bt_allreduce_hier(bt_world *w, void *buf, size_t count, bt_dtype t, bt_op op);

#endif
