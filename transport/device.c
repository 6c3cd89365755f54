/* device.c: device memory in the transport: the hooks the engine hands over,
 * the path device buffers take to each peer (agreed by every rank in
 * bt_world_set_device), the check that refuses a buffer its backend cannot
 * take, and the transport's own waited-for device copies (the self backend,
 * the staged collectives).
 *
 * Paths, for a pair of ranks that both set hooks: the rank itself "copy";
 * the same node with NCCL serving it "nccl"; both UCX builds able to send CUDA
 * memory "direct"; otherwise "staged". Both ends must pick the same path for
 * a message to match, which is why the choice is made from the capabilities
 * every rank published in one all-gather, not from this rank's alone. */
#define _GNU_SOURCE
#include "config.h"

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "transport/internal.h"

/* What a rank tells the others in bt_world_set_device. */
typedef struct {
    int32_t has_hooks;
    int32_t ucx_cuda;     /* its UCX sends CUDA memory itself */
    int32_t nccl_usable;  /* NCCL build, a GPU id, intra != ucx, the GPU's key known */
    int32_t node;
    uint64_t chunk_bytes; /* staging chunk size */
    char gpu_key[64];     /* PCI bus id of its GPU */
} device_caps;

static const char *const path_names[] = {NULL, "copy", "nccl", "direct", "staged"};

const char *bt_mem_name(bt_mem mem) { return mem == BT_MEM_DEVICE ? "device" : "host"; }

static int hooks_complete(const bt_device_hooks *h)
{
    return h->host_alloc && h->host_free && h->stream_create && h->stream_destroy &&
           h->event_create && h->event_destroy && h->event_record && h->event_query &&
           h->copy_async && h->copy;
}

static device_caps my_caps(bt_world *w, const bt_device_hooks *hooks)
{
    device_caps c;
    memset(&c, 0, sizeof c);
    c.has_hooks = hooks != NULL;
    c.node = w->node;
    c.chunk_bytes = bt_staging_chunk_bytes();
    c.ucx_cuda = w->size > 1 && bt_backend_ucx_cuda(w->intra);
#ifdef HAVE_NCCL
    c.nccl_usable = hooks && hooks->device_id >= 0 && strcmp(w->opt.intra, "ucx") != 0 &&
                    w->local_size > 0 && w->size > 1 &&
                    bt_nccl_device_key(hooks->device_id, c.gpu_key, sizeof c.gpu_key) == 0;
#endif
    return c;
}

/* Whether NCCL serves this node: every local rank can use it and drives its
 * own GPU (NCCL refuses two ranks on one GPU; they are staged instead). Every
 * rank of the node reaches the same verdict from the same table. */
static int node_uses_nccl(bt_world *w, const device_caps *all, char *why, size_t why_len)
{
    snprintf(why, why_len, "this build has no NCCL");
#ifdef HAVE_NCCL
    if (w->local_size < 2) {
        snprintf(why, why_len, "a node of %d rank%s needs no NCCL", w->local_size,
                 w->local_size == 1 ? "" : "s");
        return 0;
    }
    for (int r = 0; r < w->size; r++) {
        if (all[r].node != w->node) continue;
        if (!all[r].nccl_usable) {
            snprintf(why, why_len, "rank %d has no GPU for NCCL", r);
            return 0;
        }
        for (int q = 0; q < r; q++)
            if (all[q].node == w->node && strcmp(all[q].gpu_key, all[r].gpu_key) == 0) {
                snprintf(why, why_len, "ranks %d and %d drive the same GPU (%s)", q, r,
                         all[r].gpu_key);
                return 0;
            }
    }
    return 1;
#else
    (void)w, (void)all;
    return 0;
#endif
}

static bt_path pair_path(bt_world *w, const device_caps *all, int peer, int nccl)
{
    if (!all[w->rank].has_hooks || !all[peer].has_hooks) return BT_PATH_NONE;
    if (peer == w->rank) return BT_PATH_COPY;
    if (nccl && all[peer].node == w->node) return BT_PATH_NCCL;
    if (all[w->rank].ucx_cuda && all[peer].ucx_cuda) return BT_PATH_DIRECT;
    return BT_PATH_STAGED;
}

static bt_status add_backend(bt_world *w, bt_backend *b)
{
    if (w->n_backends == BT_MAX_BACKENDS)
        return bt_fail(w, BT_ERR_SYS, "too many transport backends");
    w->backends[w->n_backends++] = b;
    return BT_OK;
}

/* Creates the staging and NCCL backends the paths need. */
static bt_status make_backends(bt_world *w, int nccl, size_t chunk_bytes)
{
    int staged = 0;
    for (int r = 0; r < w->size; r++) staged |= w->paths[r] == BT_PATH_STAGED;
    bt_status st = BT_OK;
    if (staged) {
        st = bt_backend_staging_create(w, chunk_bytes, &w->staging);
        if (st == BT_OK) st = add_backend(w, w->staging);
    }
#ifdef HAVE_NCCL
    if (st == BT_OK && nccl) {
        st = bt_backend_nccl_create(w, w->hooks.device_id, &w->nccl);
        if (st == BT_OK) st = add_backend(w, w->nccl);
    }
#else
    (void)nccl;
#endif
    return st;
}

/* Every rank publishes its capabilities; each derives the paths of its pairs. */
static bt_status agree_paths(bt_world *w, const bt_device_hooks *hooks)
{
    size_t n_ranks = w->size > 0 ? (size_t)w->size : 1;
    device_caps mine = my_caps(w, hooks);
    if (mine.chunk_bytes == 0)
        return bt_fail(w, BT_ERR_CONFIG, "BURST_STAGE_CHUNK='%s' is not a size in bytes "
                                         "(e.g. 1048576 or 1M)", getenv("BURST_STAGE_CHUNK"));
    device_caps *all = calloc(n_ranks, sizeof *all);
    w->paths = calloc(n_ranks, 1);
    bt_status st = all && w->paths ? bt_allgather(w->world_comm, &mine, all, sizeof mine)
                                   : bt_fail(w, BT_ERR_SYS, "out of memory for the device paths");
    for (int r = 0; st == BT_OK && r < w->size; r++)
        if (all[r].chunk_bytes != mine.chunk_bytes)
            st = bt_fail(w, BT_ERR_CONFIG, "BURST_STAGE_CHUNK differs: %llu bytes on rank %d, "
                         "%llu here", (unsigned long long)all[r].chunk_bytes, r,
                         (unsigned long long)mine.chunk_bytes);
    char why[160];
    int nccl = st == BT_OK && node_uses_nccl(w, all, why, sizeof why);
    if (st == BT_OK && !nccl && strcmp(w->opt.intra, "nccl") == 0 && w->local_size > 1)
        st = bt_fail(w, BT_ERR_CONFIG, "transport.intra = nccl, but NCCL cannot serve node %d: %s",
                     w->node, why);
    /* NCCL's ids travel over the intra-node communicator; the split is
     * collective over the world, so every rank makes it. */
    if (st == BT_OK && !w->intra_comm && w->size > 1) st = bt_comm_intra_node(w, &w->intra_comm);
    for (int r = 0; st == BT_OK && r < w->size; r++)
        w->paths[r] = (unsigned char)pair_path(w, all, r, nccl);
    if (st == BT_OK) st = make_backends(w, nccl, (size_t)mine.chunk_bytes);
    free(all);
    return st;
}

bt_status bt_world_set_device(bt_world *w, const bt_device_hooks *hooks)
{
    if (!w || w->device_set || (hooks && !hooks_complete(hooks))) return BT_ERR_ARG;
    bt_status st = (bt_status)atomic_load(&w->failed);
    if (st != BT_OK) return st;
    w->device_set = 1;
    if (hooks) {
        w->hooks = *hooks;
        w->has_hooks = 1;
        if (hooks->stream_create(&w->dev_stream) != 0)
            return bt_fail(w, BT_ERR_SYS, "device hooks (%s): cannot create the transport's stream",
                           hooks->name ? hooks->name : "?");
    }
    st = agree_paths(w, hooks);
    if (st == BT_OK && w->opt.verbose)
        for (int r = 0; r < w->size; r++)
            fprintf(stderr, "burst: rank %d: device buffers to rank %d: %s\n", w->rank, r,
                    path_names[w->paths[r]] ? path_names[w->paths[r]] : "none");
    return st;
}

void bt_device_release(bt_world *w)
{
    if (w->has_hooks && w->dev_stream) w->hooks.stream_destroy(w->dev_stream);
    w->dev_stream = NULL;
    free(w->paths);
    w->paths = NULL;
}

const char *bt_comm_device_path(bt_comm *c, int peer)
{
    if (!c || peer < 0 || peer >= c->size || !c->world->paths) return NULL;
    return path_names[c->world->paths[c->world_ranks[peer]]];
}

bt_status bt_world_device_path_table(bt_world *w, char *table)
{
    if (!w || !table || !w->paths) return BT_ERR_ARG;
    bt_status st = bt_allgather(w->world_comm, w->paths, table, (size_t)w->size);
    for (size_t i = 0; st == BT_OK && i < (size_t)w->size * (size_t)w->size; i++) {
        const char *name = path_names[(unsigned char)table[i]];
        table[i] = name ? name[0] : '-';
    }
    return st;
}

bt_backend *bt_backend_for_mem(bt_world *w, int world_peer, bt_mem mem)
{
    if (mem == BT_MEM_HOST) return bt_backend_for(w, world_peer);
    switch (w->paths ? (bt_path)w->paths[world_peer] : BT_PATH_NONE) {
    case BT_PATH_COPY: return w->self;
    case BT_PATH_NCCL: return w->nccl;
    case BT_PATH_DIRECT: return bt_backend_for(w, world_peer);
    case BT_PATH_STAGED: return w->staging;
    default: return NULL;
    }
}

bt_status bt_mem_check(bt_world *w, const bt_backend *b, int world_peer, bt_mem mem)
{
    if (b && (b->ops->mem_kinds & BT_MEM_BIT(mem))) return BT_OK;
    if (b)
        return bt_fail(w, BT_ERR_ARG, "the %s transport to rank %d takes no %s memory", b->ops->name,
                       world_peer, bt_mem_name(mem));
    const bt_backend *host = bt_backend_for(w, world_peer);
    return bt_fail(w, BT_ERR_ARG, "%s memory to or from rank %d: %s, and the %s transport takes "
                   "host memory only", bt_mem_name(mem), world_peer,
                   !w->has_hooks ? "no device hooks were set on this rank (bt_world_set_device)"
                                 : "that rank has no device hooks",
                   host->ops->name);
}

/* ------------------------------------------------------------------ waited-for copies */

/* Spin a little, then give the CPU away between polls (see wait_pause in
 * world.c: other ranks may share this core). */
static void poll_pause(long iteration)
{
    if (iteration > 1000) sched_yield();
}

bt_status bt_poll_wait(bt_world *w, int (*poll)(void *arg, bt_status *st), void *arg,
                       const char *what)
{
    double t0 = bt_now();
    for (long it = 0;; it++) {
        bt_status st = BT_OK;
        int done = poll(arg, &st);
        if (st != BT_OK) return st;
        if (done) return BT_OK;
        st = bt_progress(w);
        if (st != BT_OK) return st;
        if (bt_now() - t0 > w->opt.timeout_s)
            return bt_fail(w, BT_ERR_TIMEOUT, "timed out after %.0f s waiting for %s",
                           bt_now() - t0, what);
        poll_pause(it);
    }
}

typedef struct {
    bt_world *w;
    void *event;
    const char *what;
} event_poll;

bt_status bt_device_fail(bt_world *w, const char *what)
{
    const char *why = w->hooks.last_error ? w->hooks.last_error() : NULL;
    return bt_fail(w, BT_ERR_SYS, "device (%s): %s failed%s%s", w->hooks.name, what,
                   why && *why ? ": " : "", why && *why ? why : "");
}

static int event_done(void *arg, bt_status *st)
{
    event_poll *p = arg;
    int q = p->w->hooks.event_query(p->event);
    if (q < 0) *st = bt_device_fail(p->w, p->what);
    return q > 0;
}

bt_status bt_device_event_wait(bt_world *w, void *event, const char *what)
{
    event_poll p = {w, event, what};
    return bt_poll_wait(w, event_done, &p, what);
}

bt_status bt_device_copy_wait(bt_world *w, void *dst, const void *src, size_t bytes, int dir)
{
    if (bytes == 0) return BT_OK;
    if (!w->has_hooks) return bt_mem_check(w, NULL, w->rank, BT_MEM_DEVICE);
    if (w->hooks.copy(w->dev_stream, dst, src, bytes, dir) != 0) {
        char what[64];
        snprintf(what, sizeof what, "a copy of %zu bytes", bytes);
        return bt_device_fail(w, what);
    }
    return BT_OK;
}
