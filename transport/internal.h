/* internal.h: what the files of the transport share and nobody else sees: the
 * world and communicator structures, the backend table (with the memory kinds
 * each backend accepts), the wire-up results, the device paths and the sticky
 * error state. */
#ifndef BURST_TRANSPORT_INTERNAL_H
#define BURST_TRANSPORT_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "transport/transport.h"
#include "util/clock.h"

typedef struct bt_backend bt_backend;

enum { BT_REQ_SEND = 1, BT_REQ_RECV = 2, BT_REQ_COLLECTIVE = 3 };

struct bt_request {
    bt_world *world;
    bt_backend *backend;
    int kind;        /* BT_REQ_SEND, BT_REQ_RECV or BT_REQ_COLLECTIVE (bt_iallreduce_mem) */
    bt_mem mem;      /* where buf lives */
    int world_peer;  /* the other end, as a world rank */
    int channel;
    size_t bytes;
    int done;        /* set by the backend when the transfer completed */
    bt_status status;
    void *impl;      /* backend-private handle */
    void *buf;       /* the user's buffer (self backend copies into it) */
    uint64_t tag;
    struct bt_request *next; /* self backend's queues */
};

/* A memory kind as a bit of bt_backend_ops.mem_kinds. */
#define BT_MEM_BIT(kind) (1u << (unsigned)(kind))

/* One way of moving bytes. Tags carry (communicator, channel, source rank) and
 * are matched exactly; a backend must deliver same-tag messages in order. */
typedef struct {
    const char *name;
    /* The memory kinds its isend and irecv accept (BT_MEM_BIT of each). The
     * world checks every buffer against it before posting (bt_mem_check) and
     * refuses another kind with BT_ERR_ARG, so a backend may take every buffer
     * it is handed to be of a kind it lists. ucx: host, or host and device
     * when UCX supports CUDA memory (two tables); self: both (device through
     * the hooks); staged: device; nccl: device. */
    unsigned mem_kinds;
    bt_status (*isend)(bt_backend *b, bt_request *req, const void *buf);
    bt_status (*irecv)(bt_backend *b, bt_request *req);
    /* Sets req->done and req->status once the transfer completed. */
    void (*test)(bt_backend *b, bt_request *req);
    /* Drops an unfinished request after an error; the buffer is no longer touched. */
    void (*cancel)(bt_backend *b, bt_request *req);
    void (*progress)(bt_backend *b);
    /* Waits until every posted send has left this process. */
    bt_status (*flush)(bt_backend *b);
    void (*finalize)(bt_backend *b);
    /* Issues what was posted since the world's group started (NULL: the
     * backend posts at once and has nothing to do). */
    bt_status (*group_end)(bt_backend *b);
    /* Writes into out[len] the wires this backend uses to reach world peer
     * (creating what it needs to know them), space-separated, e.g. UCX's
     * "sysv/memory cma/memory" (transport/device name of each lane). NULL: the
     * backend is its own wire and bt_world_wires names it alone. */
    bt_status (*wires)(bt_backend *b, int peer, char *out, size_t len);
} bt_backend_ops;

struct bt_backend {
    const bt_backend_ops *ops;
    bt_world *world;
    void *impl;
};

/* What wire-up learned about one rank. */
typedef struct {
    int node;         /* node index, node-major */
    int local_rank;
    int launch_rank;  /* rank the launcher gave it (before node-major ordering) */
    size_t addr_len;  /* backend address (UCX worker address) */
    unsigned char *addr;
} bt_peer_info;

/* Identity as the launcher told it, before wire-up. */
typedef struct {
    const char *source;    /* "pmix", "slurm", "burst-run", "single" */
    int rank, size;
    char node_name[256];   /* BURST_NODE_ID overrides the host name */
    char root_host[256];   /* where rank 0 listens */
    int root_port;
    int root_listen_fd;    /* rank 0: a socket already listening (from burst run), else -1 */
    char secret[129];      /* the job's secret, hex */
    char job_id[64];       /* distinguishes jobs sharing a secret file */
} bt_identity;

struct bt_comm {
    bt_world *world;
    uint32_t id;          /* equal on every member; unique for any pair of ranks */
    int rank, size;
    int *world_ranks;     /* [size] */
    uint32_t n_children;
};

/* How device buffers travel to one peer (bt_comm_device_path names them). */
typedef enum {
    BT_PATH_NONE = 0, /* no hooks on one of the two ends: device buffers are refused */
    BT_PATH_COPY,     /* the rank itself: the self backend copies */
    BT_PATH_NCCL,
    BT_PATH_DIRECT,   /* UCX with CUDA memory support */
    BT_PATH_STAGED,   /* pinned host buffers over UCX (transport/staging.c) */
} bt_path;

enum { BT_MAX_BACKENDS = 4 };

struct bt_world {
    bt_options opt;
    bt_identity ident;
    int rank, size;       /* node-major world rank */
    int node, n_nodes, local_rank, local_size;
    bt_peer_info *peers;  /* [size] */
    bt_comm *world_comm;
    bt_comm *intra_comm, *inter_comm; /* made on first use */
    uint32_t max_comm_id; /* highest communicator id this rank took part in */

    bt_backend *intra, *inter; /* host memory; may be the same backend */
    bt_backend *self;          /* a rank's messages to itself */
    bt_backend *backends[BT_MAX_BACKENDS]; /* each once; layered ones after what they use */
    int n_backends;

    /* Device memory (transport/device.c), set by bt_world_set_device. */
    int device_set;           /* bt_world_set_device was called */
    int has_hooks;            /* ... with hooks */
    bt_device_hooks hooks;
    void *dev_stream;         /* the transport's own device copies */
    unsigned char *paths;     /* [size] bt_path of each peer */
    bt_backend *staging;      /* BT_PATH_STAGED, or NULL */
    bt_backend *nccl;         /* BT_PATH_NCCL, or NULL */
    int in_group;             /* between bt_group_start and bt_group_end */

    bt_counter counters[BT_MAX_CHANNELS];

    /* Control plane: TCP star through rank 0, watched by a thread. */
    int ctl_fd;           /* non-root: socket to rank 0 */
    int *ctl_fds;         /* root: [size] sockets, -1 for itself */
    pthread_t ctl_thread;
    atomic_int ctl_running;
    int ctl_started;
    int ctl_wake[2];      /* pipe to wake the control thread */
    atomic_int finalizing;
    atomic_int finished;  /* root said every rank reached finalize */
    atomic_int error_seen; /* a caller was handed the error (else the watchdog exits) */

    /* Sticky error: the first failure wins and every later call returns it. */
    pthread_mutex_t err_lock;
    atomic_int failed;    /* a bt_status, 0 while healthy */
    char err[512];
    double failed_at;     /* monotonic seconds */
};

/* Records the first error (later ones are ignored); returns st. */
bt_status bt_fail(bt_world *w, bt_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* The transport's clock: util's monotonic seconds (util/clock.h). */
static inline double bt_now(void)
{
    return bu_now();
}
/* A zeroed buffer of bytes (util/alloc.h's bu_calloc), or NULL after
 * bt_fail(w, BT_ERR_SYS, "out of memory: cannot allocate N bytes (H) for
 * WHAT"): the transport's one way to allocate. */
void *bt_calloc(bt_world *w, size_t bytes, const char *what);
double bt_now(void);

/* Bootstrap: who am I, where is rank 0, what is the secret. */
bt_status bt_identity_detect(bt_identity *id, char *err, size_t err_len);
/* Wire-up through rank 0: exchanges every rank's backend address, orders ranks
 * node-major, fills w->peers, w->rank, w->node... and leaves the control sockets open. */
bt_status bt_rendezvous(bt_world *w, const unsigned char *my_addr, size_t my_addr_len);
/* Control plane: heartbeats, lost-rank detection, the finalize handshake. */
bt_status bt_control_start(bt_world *w);
bt_status bt_control_finalize(bt_world *w); /* waits for every rank's "done" */
void bt_control_stop(bt_world *w, int abort);
/* A backend found its connection to peer failed (detail: the backend's words).
 * Rank 0 announces PEER lost to every rank; another rank reports it to rank 0
 * and takes rank 0's word when it comes within about a heartbeat (the failing
 * peer may only be leaving after another rank's loss was announced), else
 * names PEER itself. Returns the world's (sticky) failure status. */
bt_status bt_control_link_lost(bt_world *w, int peer, const char *detail);

/* A TCP socket listening on port (0: any free port); returns the fd or -1. */
int bt_tcp_listen(int port, int *bound_port, char *err, size_t err_len);
/* n_bytes random bytes as 2 * n_bytes hex characters (out must hold that + 1). */
int bt_random_hex(char *out, size_t n_bytes);

/* First host of a Slurm host list ("n[01-04],m" -> "n01"). */
int bt_hostlist_first(const char *list, char *out, size_t out_len);

/* Backends. */
bt_status bt_backend_ucx_create(bt_world *w, bt_backend **out, unsigned char **addr,
                                size_t *addr_len);
bt_status bt_backend_ucx_connect(bt_backend *b); /* after wire-up: peers' addresses known */
bt_status bt_backend_self_create(bt_world *w, bt_backend **out);
/* 1 when this UCX sends device (CUDA) memory itself (UCX reports CUDA among
 * its memory types, and BURST_UCX_CUDA is not 0): its table then lists device
 * memory too. */
int bt_backend_ucx_cuda(const bt_backend *b);
/* Device buffers through pinned host buffers over the host backend of each
 * peer (transport/staging.c); chunk_bytes as agreed by bt_world_set_device. */
bt_status bt_backend_staging_create(bt_world *w, size_t chunk_bytes, bt_backend **out);
/* The staging chunk size this rank would use (BURST_STAGE_CHUNK or the
 * default); 0 when the variable is not a size in bytes. */
size_t bt_staging_chunk_bytes(void);
/* A buffer of the staging pool: chunk_bytes of page-locked memory and the
 * event of the last copy into or out of it. */
typedef struct bt_stage_buf {
    void *host;
    void *event;
    struct bt_stage_buf *next; /* the pool's free list */
} bt_stage_buf;
/* For the staged device collectives: n buffers of the staging pool (free
 * ones, else new ones, as a message takes them) in bufs, and the pool's
 * device-to-host and host-to-device streams. BT_ERR_ARG when the world
 * stages no peer (no pool); the failure, with nothing lent, when a buffer
 * cannot be made. */
bt_status bt_staging_lend(bt_world *w, int n, bt_stage_buf **bufs, void **d2h_stream,
                          void **h2d_stream);
/* Gives back n buffers lent (their copies done). */
void bt_staging_take_back(bt_world *w, int n, bt_stage_buf **bufs);
#ifdef HAVE_PMIX
bt_status bt_pmix_identity(bt_identity *id, char *err, size_t err_len);
void bt_pmix_finalize(void);
#endif
#ifdef HAVE_NCCL
/* Collective over the node's ranks (w->intra_comm made): one NCCL communicator
 * per user channel and one for the collectives, on device_id. */
bt_status bt_backend_nccl_create(bt_world *w, int device_id, bt_backend **out);
/* The GPU's PCI bus id: two ranks drive the same GPU when their keys match. */
int bt_nccl_device_key(int device_id, char *key, size_t key_len);
/* Blocking collectives over the node's NCCL communicator (comm ranks = local
 * ranks); kind: BT_COLL_*. */
bt_status bt_nccl_collective(bt_backend *b, int kind, const void *send, void *recv, size_t count,
                             bt_dtype t, bt_op op);
/* The same, issued on NCCL's stream and not waited for: req (kind
 * BT_REQ_COLLECTIVE, on a reserved channel, backend b) completes through the
 * backend's test once the result is in recv. */
bt_status bt_nccl_collective_start(bt_backend *b, int kind, const void *send, void *recv,
                                   size_t count, bt_dtype t, bt_op op, bt_request *req);
#endif
enum { BT_COLL_ALLREDUCE, BT_COLL_REDUCE_SCATTER, BT_COLL_ALLGATHER };
/* What a collective on memory of kind mem checks before it runs
 * (collectives_mem.c): c and mem valid and no group open (BT_ERR_ARG, the
 * world not failed), the world not failed (its status), device hooks set for
 * device memory (else the refusal bt_mem_check gives). */
bt_status bt_collective_check(bt_comm *c, bt_mem mem);

/* Device memory (transport/device.c). */
/* The backend that carries memory of kind mem to world_peer, or NULL. */
bt_backend *bt_backend_for_mem(bt_world *w, int world_peer, bt_mem mem);
/* BT_OK when b accepts mem; else the world fails with BT_ERR_ARG and a message
 * naming the backend (b NULL: no path), the peer and the memory kind. */
bt_status bt_mem_check(bt_world *w, const bt_backend *b, int world_peer, bt_mem mem);
/* dst[bytes] = src[bytes] with the hooks' blocking copy (dir as copy_async):
 * the host side may be pageable memory (a message queued for the rank itself,
 * a collective staged through plain host memory). */
bt_status bt_device_copy_wait(bt_world *w, void *dst, const void *src, size_t bytes, int dir);
/* Calls poll(arg, &st) until it answers nonzero or sets st, with bt_progress
 * between calls; fails on a lost peer or after the timeout, naming what it
 * waited for. */
bt_status bt_poll_wait(bt_world *w, int (*poll)(void *arg, bt_status *st), void *arg,
                       const char *what);
/* Polls event (of the hooks) until done, as bt_poll_wait. */
bt_status bt_device_event_wait(bt_world *w, void *event, const char *what);
/* The world fails (BT_ERR_SYS) with "device (NAME): WHAT failed", and what
 * the device runtime said (the hooks' last_error) when it said something. */
bt_status bt_device_fail(bt_world *w, const char *what);
const char *bt_mem_name(bt_mem mem);
/* Frees what bt_world_set_device made (after the backends are gone). */
void bt_device_release(bt_world *w);

/* Tag layout: [comm id: 24][channel: 8][source world rank: 32]. */
static inline uint64_t bt_make_tag(uint32_t comm_id, int channel, int src_world_rank)
{
    return ((uint64_t)(comm_id & 0xffffffu) << 40) | ((uint64_t)(channel & 0xff) << 32) |
           (uint64_t)(uint32_t)src_world_rank;
}

/* Staged device messages travel in chunks on their own tags (this bit added
 * to the channel), so a chunk is never matched by a host message. */
enum { BT_STAGED_CHANNEL_BIT = 0x80 };
_Static_assert((int)BT_MAX_CHANNELS <= (int)BT_STAGED_CHANNEL_BIT,
               "a channel must fit the tag's 8 bits below the staged bit");

/* Whether a world peer is on this rank's node (as the launch says: burst
 * run --nodes, BURST_NODE_ID, or the host). */
static inline int bt_peer_on_my_node(const bt_world *w, int world_peer)
{
    return w->peers[world_peer].node == w->node;
}

/* Backend reaching a world peer with host memory. */
static inline bt_backend *bt_backend_for(bt_world *w, int world_peer)
{
    if (world_peer == w->rank) return w->self;
    return bt_peer_on_my_node(w, world_peer) ? w->intra : w->inter;
}

#endif
