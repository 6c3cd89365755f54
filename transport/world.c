/* world.c: the world and its communicators, point-to-point dispatch to the
 * backend that reaches each peer with each kind of memory, groups of posts,
 * waiting with a deadline, byte counters, and the sticky error that turns any
 * failure into a prompt, named exit. */
#define _GNU_SOURCE
#include "config.h"

#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "transport/internal.h"
#include "transport/launch.h"
#include "util/alloc.h"


bt_status bt_fail(bt_world *w, bt_status st, const char *fmt, ...)
{
    pthread_mutex_lock(&w->err_lock);
    if (atomic_load(&w->failed) == 0) {
        va_list ap;
        va_start(ap, fmt);
        int n = snprintf(w->err, sizeof w->err, "rank %d: ", w->rank);
        if (n < 0 || (size_t)n >= sizeof w->err) n = 0;
        vsnprintf(w->err + n, sizeof w->err - (size_t)n, fmt, ap);
        va_end(ap);
        w->failed_at = bt_now();
        atomic_store(&w->failed, (int)st);
    }
    pthread_mutex_unlock(&w->err_lock);
    return st;
}

void *bt_calloc(bt_world *w, size_t bytes, const char *what)
{
    char err[256];
    void *p = bu_calloc(bytes, what, err, sizeof err);
    if (!p) bt_fail(w, BT_ERR_SYS, "%s", err);
    return p;
}

void bt_options_default(bt_options *opt)
{
    opt->intra = "auto";
    opt->inter = "ucx";
    opt->timeout_s = 60.0;
    opt->verbose = 0;
    const char *t = getenv(BURST_ENV_TIMEOUT);
    if (t && atof(t) > 0) opt->timeout_s = atof(t);
}

/* A communicator of size ranks, world_ranks[i] the world rank of its rank i
 * (NULL: the world itself); NULL with the world's error when out of memory. */
static bt_comm *comm_new(bt_world *w, uint32_t id, int rank, int size, const int *world_ranks)
{
    bt_comm *c = bt_calloc(w, sizeof *c, "a communicator");
    int *ranks = c ? bt_calloc(w, (size_t)size * sizeof(int), "a communicator's ranks") : NULL;
    if (!ranks) {
        free(c);
        return NULL;
    }
    for (int i = 0; i < size; i++) ranks[i] = world_ranks ? world_ranks[i] : i;
    *c = (bt_comm){.world = w, .id = id, .rank = rank, .size = size, .world_ranks = ranks};
    return c;
}

static bt_status check_options(const bt_options *opt, char *err, size_t err_len)
{
    if (strcmp(opt->intra, "auto") != 0 && strcmp(opt->intra, "ucx") != 0 &&
        strcmp(opt->intra, "nccl") != 0) {
        snprintf(err, err_len, "transport.intra: unknown backend '%s' (auto, ucx or nccl)",
                 opt->intra);
        return BT_ERR_CONFIG;
    }
#ifndef HAVE_NCCL
    if (strcmp(opt->intra, "nccl") == 0) {
        snprintf(err, err_len, "transport.intra = nccl, but this build has no NCCL "
                               "(configure --with-cuda --with-nccl)");
        return BT_ERR_CONFIG;
    }
#endif
    if (strcmp(opt->inter, "ucx") != 0) {
        snprintf(err, err_len, "transport.inter: unknown backend '%s' (ucx)", opt->inter);
        return BT_ERR_CONFIG;
    }
    if (!(opt->timeout_s > 0)) {
        snprintf(err, err_len, "transport.timeout: must be > 0 seconds, got %g", opt->timeout_s);
        return BT_ERR_CONFIG;
    }
    return BT_OK;
}

/* A world of one rank: its messages to itself through the self backend. */
static bt_status connect_alone(bt_world *w, char *err, size_t err_len)
{
    w->n_nodes = 1;
    w->local_size = 1;
    w->peers = bt_calloc(w, sizeof *w->peers, "the world's peers");
    bt_status st = w->peers ? bt_backend_self_create(w, &w->intra) : BT_ERR_SYS;
    if (st != BT_OK) {
        snprintf(err, err_len, "%s", w->err);
        free(w->peers);
        return st;
    }
    w->inter = w->self = w->intra;
    w->backends[w->n_backends++] = w->intra;
    return BT_OK;
}

/* Several ranks: UCX's addresses exchanged at the rendezvous, UCX connected
 * to every peer, the self backend for a rank's messages to itself, the
 * control plane started; on failure what was made is undone. */
static bt_status connect_peers(bt_world *w, char *err, size_t err_len)
{
    bt_backend *ucx = NULL;
    unsigned char *addr = NULL;
    size_t addr_len = 0;
    bt_status st = bt_backend_ucx_create(w, &ucx, &addr, &addr_len);
    if (st == BT_OK) st = bt_rendezvous(w, addr, addr_len);
    if (st == BT_OK) {
        w->intra = w->inter = ucx;
        w->backends[w->n_backends++] = ucx;
        st = bt_backend_ucx_connect(ucx);
    }
    if (st == BT_OK) {
        /* A rank's messages to itself: copied at once, in either memory. */
        st = bt_backend_self_create(w, &w->self);
        if (st == BT_OK) w->backends[w->n_backends++] = w->self;
    }
    if (st == BT_OK) st = bt_control_start(w);
    if (st != BT_OK) {
        snprintf(err, err_len, "%s", w->err[0] ? w->err : bt_status_name(st));
        if (w->self) w->self->ops->finalize(w->self);
        if (ucx) ucx->ops->finalize(ucx);
        bt_control_stop(w, 1);
    }
    return st;
}

bt_status bt_world_init(const bt_options *opt_in, bt_world **out, char *err, size_t err_len)
{
    bt_options opt;
    if (opt_in)
        opt = *opt_in;
    else
        bt_options_default(&opt);
    *out = NULL;
    bt_status st = check_options(&opt, err, err_len);
    if (st != BT_OK) return st;

    bt_world *w = calloc(1, sizeof *w);
    if (!w) {
        bu_no_memory(err, err_len, sizeof *w, "the world");
        return BT_ERR_SYS;
    }
    w->opt = opt;
    w->ctl_fd = -1;
    w->ctl_wake[0] = w->ctl_wake[1] = -1;
    pthread_mutex_init(&w->err_lock, NULL);
    st = bt_identity_detect(&w->ident, err, err_len);
    if (st != BT_OK) {
        free(w);
        return st;
    }
    w->rank = w->ident.rank;
    w->size = w->ident.size;

    st = w->size == 1 ? connect_alone(w, err, err_len) : connect_peers(w, err, err_len);
    if (st != BT_OK) {
        free(w);
        return st;
    }
    w->world_comm = comm_new(w, 1, w->rank, w->size, NULL);
    w->max_comm_id = 1;
    if (!w->world_comm) {
        snprintf(err, err_len, "%s", w->err);
        bt_world_abort(w);
        return BT_ERR_SYS;
    }

    if (opt.verbose)
        fprintf(stderr, "burst: rank %d of %d (node %d of %d, local %d), bootstrap %s\n", w->rank,
                w->size, w->node, w->n_nodes, w->local_rank, w->ident.source);
    *out = w;
    return BT_OK;
}

static void world_free(bt_world *w)
{
    /* Layered backends (staging over UCX) go before what they use. */
    for (int i = w->n_backends - 1; i >= 0; i--) w->backends[i]->ops->finalize(w->backends[i]);
    bt_device_release(w);
    bt_comm_free(w->intra_comm);
    bt_comm_free(w->inter_comm);
    bt_comm_free(w->world_comm);
    for (int i = 0; i < w->size && w->peers; i++) free(w->peers[i].addr);
    free(w->peers);
    free(w->ctl_fds);
    pthread_mutex_destroy(&w->err_lock);
#ifdef HAVE_PMIX
    if (strcmp(w->ident.source, "pmix") == 0) bt_pmix_finalize();
#endif
    free(w);
}

bt_status bt_world_finalize(bt_world *w)
{
    if (!w) return BT_ERR_ARG;
    bt_status st = (bt_status)atomic_load(&w->failed);
    for (int i = w->n_backends - 1; st == BT_OK && i >= 0; i--)
        st = w->backends[i]->ops->flush(w->backends[i]);
    if (st == BT_OK && w->size > 1) st = bt_control_finalize(w);
    bt_control_stop(w, st != BT_OK);
    world_free(w);
    return st;
}

void bt_world_abort(bt_world *w)
{
    if (!w) return;
    bt_control_stop(w, 1);
    world_free(w);
}

int bt_world_rank(const bt_world *w) { return w->rank; }
int bt_world_size(const bt_world *w) { return w->size; }
int bt_world_node(const bt_world *w) { return w->node; }
int bt_world_n_nodes(const bt_world *w) { return w->n_nodes; }
int bt_world_local_rank(const bt_world *w) { return w->local_rank; }
int bt_world_local_size(const bt_world *w) { return w->local_size; }
const char *bt_world_bootstrap(const bt_world *w) { return w->ident.source; }
bt_comm *bt_world_comm(bt_world *w) { return w->world_comm; }

const char *bt_world_error(const bt_world *w)
{
    return atomic_load(&((bt_world *)w)->failed) ? w->err : "";
}

/* ------------------------------------------------------------------ communicators */

int bt_comm_rank(const bt_comm *c) { return c->rank; }
int bt_comm_size(const bt_comm *c) { return c->size; }
int bt_comm_world_rank(const bt_comm *c, int rank) { return c->world_ranks[rank]; }
bt_world *bt_comm_world(bt_comm *c) { return c->world; }

void bt_comm_free(bt_comm *c)
{
    if (!c) return;
    free(c->world_ranks);
    free(c);
}

struct split_entry {
    int64_t color, key, max_id, parent_rank;
};

static int split_entry_cmp(const void *a, const void *b)
{
    const struct split_entry *x = a, *y = b;
    if (x->color != y->color) return x->color < y->color ? -1 : 1;
    if (x->key != y->key) return x->key < y->key ? -1 : 1;
    return x->parent_rank < y->parent_rank ? -1 : x->parent_rank > y->parent_rank;
}

bt_status bt_comm_split(bt_comm *parent, int color, int key, bt_comm **out)
{
    if (!parent || !out) return BT_ERR_ARG;
    bt_world *w = parent->world;
    *out = NULL;
    struct split_entry mine = {color, key, w->max_comm_id, parent->rank};
    struct split_entry *all = bt_calloc(w, (size_t)parent->size * sizeof *all, "a split's members");
    int *ranks = all ? bt_calloc(w, (size_t)parent->size * sizeof(int), "a split's ranks") : NULL;
    /* out of memory: the world has failed (bt_calloc), and the other members
     * learn it in the allgather they wait in, as from any failed rank */
    bt_status st = ranks ? bt_allgather(parent, &mine, all, sizeof mine) : BT_ERR_SYS;
    if (st != BT_OK) {
        free(all);
        free(ranks);
        return st;
    }
    /* A fresh id larger than any id a member has used keeps (id, pair of ranks)
     * unique; sibling groups take consecutive ids. */
    int64_t base = 0;
    for (int i = 0; i < parent->size; i++)
        if (all[i].max_id > base) base = all[i].max_id;
    base += 1;
    qsort(all, (size_t)parent->size, sizeof *all, split_entry_cmp);
    int n_colors = 0, my_color_index = -1, n = 0, my_rank = -1;
    for (int i = 0; i < parent->size; i++) {
        if (all[i].color < 0) continue;
        if (i == 0 || all[i].color != all[i - 1].color || all[i - 1].color < 0) n_colors++;
        if (all[i].color == color) {
            my_color_index = n_colors - 1;
            if (all[i].parent_rank == parent->rank) my_rank = n;
            ranks[n++] = parent->world_ranks[all[i].parent_rank];
        }
    }
    w->max_comm_id = (uint32_t)(base + n_colors);
    if (color >= 0) *out = comm_new(w, (uint32_t)(base + my_color_index), my_rank, n, ranks);
    free(ranks);
    free(all);
    return color >= 0 && !*out ? BT_ERR_SYS : BT_OK;
}

bt_status bt_comm_intra_node(bt_world *w, bt_comm **out)
{
    return bt_comm_split(w->world_comm, w->node, w->local_rank, out);
}

bt_status bt_comm_inter_node(bt_world *w, bt_comm **out)
{
    return bt_comm_split(w->world_comm, w->local_rank, w->node, out);
}

bt_status bt_comm_grid(bt_world *w, int dp, int cp, bt_comm **dp_comm, bt_comm **cp_comm)
{
    if (dp < 1 || cp < 1 || dp * cp != w->size)
        return bt_fail(w, BT_ERR_CONFIG, "grid dp=%d x cp=%d does not match the world size %d",
                       dp, cp, w->size);
    bt_status st = bt_comm_split(w->world_comm, w->rank / cp, w->rank % cp, cp_comm);
    if (st != BT_OK) return st;
    return bt_comm_split(w->world_comm, w->rank % cp, w->rank / cp, dp_comm);
}

/* ------------------------------------------------------------------ point-to-point */

static bt_status post(bt_comm *c, int kind, int peer, int channel, void *buf, size_t bytes,
                      bt_mem mem, bt_request **out)
{
    if (!c || !out || peer < 0 || peer >= c->size || channel < 0 ||
        channel >= BT_MAX_CHANNELS || (bytes > 0 && !buf) ||
        (mem != BT_MEM_HOST && mem != BT_MEM_DEVICE))
        return BT_ERR_ARG;
    bt_world *w = c->world;
    *out = NULL;
    bt_status st = (bt_status)atomic_load(&w->failed);
    if (st != BT_OK) {
        atomic_store(&w->error_seen, 1);
        return st;
    }
    int world_peer = c->world_ranks[peer];
    bt_backend *b = bt_backend_for_mem(w, world_peer, mem);
    st = bt_mem_check(w, b, world_peer, mem);
    if (st != BT_OK) {
        atomic_store(&w->error_seen, 1);
        return st;
    }
    bt_request *r = bt_calloc(w, sizeof *r, "a request");
    if (!r) return BT_ERR_SYS;
    r->world = w;
    r->kind = kind;
    r->mem = mem;
    r->world_peer = world_peer;
    r->channel = channel;
    r->bytes = bytes;
    r->buf = buf;
    r->backend = b;
    r->tag = bt_make_tag(c->id, channel, kind == BT_REQ_SEND ? w->rank : r->world_peer);
    st = kind == BT_REQ_SEND ? r->backend->ops->isend(r->backend, r, buf)
                             : r->backend->ops->irecv(r->backend, r);
    if (st != BT_OK) {
        free(r);
        return st;
    }
    bt_counter *ctr = &w->counters[channel];
    if (kind == BT_REQ_SEND) {
        ctr->sent_bytes += bytes;
        ctr->sent_msgs++;
    } else {
        ctr->recv_bytes += bytes;
        ctr->recv_msgs++;
    }
    *out = r;
    return BT_OK;
}

bt_status bt_isend(bt_comm *c, int peer, int channel, const void *buf, size_t bytes,
                   bt_request **req)
{
    return post(c, BT_REQ_SEND, peer, channel, (void *)buf, bytes, BT_MEM_HOST, req);
}

bt_status bt_irecv(bt_comm *c, int peer, int channel, void *buf, size_t bytes, bt_request **req)
{
    return post(c, BT_REQ_RECV, peer, channel, buf, bytes, BT_MEM_HOST, req);
}

bt_status bt_isend_mem(bt_comm *c, int peer, int channel, const void *buf, size_t bytes,
                       bt_mem mem, bt_request **req)
{
    return post(c, BT_REQ_SEND, peer, channel, (void *)buf, bytes, mem, req);
}

bt_status bt_irecv_mem(bt_comm *c, int peer, int channel, void *buf, size_t bytes, bt_mem mem,
                       bt_request **req)
{
    return post(c, BT_REQ_RECV, peer, channel, buf, bytes, mem, req);
}

/* A group only changes what the backends with a group_end do with posts (NCCL
 * holds them until the end); the others have posted at once. */
bt_status bt_group_start(bt_world *w)
{
    if (!w || w->in_group) return BT_ERR_ARG;
    w->in_group = 1;
    return BT_OK;
}

bt_status bt_group_end(bt_world *w)
{
    if (!w || !w->in_group) return BT_ERR_ARG;
    w->in_group = 0;
    bt_status st = BT_OK;
    for (int i = 0; i < w->n_backends; i++) {
        bt_backend *b = w->backends[i];
        bt_status bst = b->ops->group_end ? b->ops->group_end(b) : BT_OK;
        if (st == BT_OK) st = bst;
    }
    return st;
}

bt_status bt_progress(bt_world *w)
{
    for (int i = 0; i < w->n_backends; i++) w->backends[i]->ops->progress(w->backends[i]);
    return (bt_status)atomic_load(&w->failed);
}

bt_status bt_world_wires(bt_world *w, int peer, char *out, size_t len)
{
    if (!w || !out || len == 0 || peer < 0 || peer >= w->size) return BT_ERR_ARG;
    bt_backend *b = bt_backend_for(w, peer);
    int n = snprintf(out, len, "%s", b->ops->name);
    if (!b->ops->wires || (size_t)n + 2 >= len) return BT_OK;
    snprintf(out + n, len - (size_t)n, ": ");
    return b->ops->wires(b, peer, out + n + 2, len - (size_t)n - 2);
}

static void request_drop(bt_request **req)
{
    bt_request *r = *req;
    if (!r->done) r->backend->ops->cancel(r->backend, r);
    free(r);
    *req = NULL;
}

bt_status bt_test(bt_request **req, int *done)
{
    if (!req || !*req || !done) return BT_ERR_ARG;
    bt_request *r = *req;
    bt_world *w = r->world;
    *done = 0;
    bt_status st = bt_progress(w);
    if (st == BT_OK && !r->done) r->backend->ops->test(r->backend, r);
    if (st == BT_OK && r->done) st = r->status;
    if (st != BT_OK) atomic_store(&w->error_seen, 1);
    if (st != BT_OK || r->done) {
        *done = 1;
        request_drop(req);
    }
    return st;
}

/* Polls without hogging a core that another rank on the same machine needs:
 * spin briefly, then yield, then sleep in short naps. */
static void wait_pause(long iteration, double waited_s)
{
    if (iteration < 2000) return;
    if (waited_s < 0.01) {
        sched_yield();
        return;
    }
    struct timespec nap = {0, 50000};
    nanosleep(&nap, NULL);
}

static bt_status timeout_error(bt_world *w, const bt_request *r, double waited)
{
    if (r->kind == BT_REQ_COLLECTIVE)
        return bt_fail(w, BT_ERR_TIMEOUT,
                       "timed out after %.0f s waiting for a collective of %zu bytes through %s",
                       waited, r->bytes, r->backend->ops->name);
    return bt_fail(w, BT_ERR_TIMEOUT,
                   "timed out after %.0f s waiting to %s %zu bytes %s rank %d on channel %d",
                   waited, r->kind == BT_REQ_SEND ? "send" : "receive", r->bytes,
                   r->kind == BT_REQ_SEND ? "to" : "from", r->world_peer, r->channel);
}

bt_status bt_waitall(int n, bt_request **reqs)
{
    bt_world *w = NULL;
    for (int i = 0; i < n && !w; i++)
        if (reqs[i]) w = reqs[i]->world;
    if (!w) return BT_OK;
    double t0 = bt_now();
    bt_status result = BT_OK;
    for (long it = 0;; it++) {
        bt_request *pending = NULL; /* one unfinished request, to name in a timeout */
        for (int i = 0; i < n && result == BT_OK; i++) {
            if (!reqs[i]) continue;
            int done = 0;
            result = bt_test(&reqs[i], &done);
            if (!done) pending = reqs[i];
        }
        double waited = bt_now() - t0;
        if (result == BT_OK && pending && waited > w->opt.timeout_s)
            result = timeout_error(w, pending, waited);
        if (result != BT_OK) {
            atomic_store(&w->error_seen, 1);
            for (int i = 0; i < n; i++)
                if (reqs[i]) request_drop(&reqs[i]);
            return result;
        }
        if (!pending) return BT_OK;
        wait_pause(it, waited);
    }
}

bt_status bt_wait(bt_request **req)
{
    if (!req || !*req) return BT_ERR_ARG;
    return bt_waitall(1, req);
}

/* ------------------------------------------------------------------ counters */

bt_counter bt_counter_get(const bt_world *w, int channel)
{
    bt_counter zero = {0, 0, 0, 0};
    if (channel < 0 || channel >= BT_MAX_CHANNELS) return zero;
    return w->counters[channel];
}

bt_counter bt_counter_total(const bt_world *w)
{
    bt_counter t = {0, 0, 0, 0};
    for (int c = 0; c < BT_MAX_CHANNELS; c++) {
        t.sent_bytes += w->counters[c].sent_bytes;
        t.recv_bytes += w->counters[c].recv_bytes;
        t.sent_msgs += w->counters[c].sent_msgs;
        t.recv_msgs += w->counters[c].recv_msgs;
    }
    return t;
}

void bt_counter_reset(bt_world *w) { memset(w->counters, 0, sizeof w->counters); }
