/* backend_ucx.c: point-to-point over UCX tag matching, on host memory. UCX
 * picks the wire: shared memory between ranks of a node, TCP or verbs between
 * nodes. One worker per process, progressed only by the thread that calls the
 * transport (UCS_THREAD_MODE_SINGLE); endpoints are created on first use so a
 * large world does not pay for peers it never talks to.
 *
 * Peer failure, and why it is asked for only between nodes. With
 * UCP_ERR_HANDLING_MODE_PEER, UCX 1.13 (Debian 12) keeps to the transports
 * that report a failed peer (`ucx_info -d`: "error handling: peer failure"),
 * which on one host leaves cma but not posix or sysv: active messages then
 * travel over TCP on the loopback device, 4-5 times slower than shared memory.
 * So an endpoint to a rank of another node asks for PEER (tcp and verbs
 * support it, and keepalive finds a peer that stops answering), and an
 * endpoint to a rank of this node asks for NONE, which lets UCX pick posix or
 * sysv for messages and cma for large transfers, as ucx_perftest does.
 * On a node the failure of a peer is then found in two ways:
 * - the control plane (transport/control.c): the dead rank's control socket
 *   closes, rank 0 announces it, and every wait here gives up on the world's
 *   failure; a send into a dead rank's shared-memory queue or a receive from
 *   it never fails by itself, it waits until that announcement;
 * - cma: a large transfer reads or writes the dead process's memory and fails.
 *   UCX hands that error to the endpoint's error callback whatever the mode,
 *   when one is installed (ucp_ep_set_failed in UCX 1.13); without a callback
 *   it would log it as fatal and abort this rank. So every endpoint installs
 *   one, and it reports the peer as lost like any other failed connection.
 *
 * Device memory: when this UCX supports CUDA memory (ucp_context_query lists
 * UCS_MEMORY_TYPE_CUDA among its memory types: a UCX built with CUDA), device
 * buffers are handed to UCX as they are, their memory type stated so UCX does
 * not have to detect it, and the backend's table lists device memory (path
 * "direct"). Debian's UCX has no CUDA: device buffers then take the staging
 * path (transport/staging.c) and this backend sees host memory only.
 * BURST_UCX_CUDA=0 forces staging on a UCX that has CUDA. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <ucp/api/ucp.h>

#include "transport/internal.h"

/* What an endpoint's error callback needs to name its peer. */
typedef struct {
    bt_world *world;
    int peer;
} ucx_peer;

typedef struct {
    ucp_context_h context;
    ucp_worker_h worker;
    ucp_address_t *address;
    size_t address_len;
    ucp_ep_h *eps;    /* [world size], NULL until first use */
    ucx_peer *peers;  /* [world size], the error callbacks' arguments */
} ucx_state;

/* A receive keeps UCX's request and where UCX reports the matched length. */
typedef struct {
    void *ucx_req;
    ucp_tag_recv_info_t info;
} ucx_recv;

static bt_status ucx_error(bt_world *w, const char *what, ucs_status_t st)
{
    return bt_fail(w, BT_ERR_SYS, "UCX %s failed: %s", what, ucs_status_string(st));
}

/* The failure of a request to or from peer: a failed connection names the
 * peer as lost, anything else is UCX's own error. A shared-memory segment of a
 * peer that cannot be attached (sysv: shmat fails) is a peer that died: its
 * segments, marked for removal, went with it. */
static bt_status peer_error(bt_world *w, int peer, const char *what, ucs_status_t st)
{
    switch (st) {
    case UCS_ERR_ENDPOINT_TIMEOUT:
    case UCS_ERR_CONNECTION_RESET:
    case UCS_ERR_UNREACHABLE:
    case UCS_ERR_REJECTED:
    case UCS_ERR_SHMEM_SEGMENT:
        return bt_control_link_lost(w, peer, ucs_status_string(st));
    default: return ucx_error(w, what, st);
    }
}

static void on_endpoint_error(void *arg, ucp_ep_h ep, ucs_status_t st)
{
    (void)ep;
    ucx_peer *p = arg;
    peer_error(p->world, p->peer, "endpoint", st);
}

/* The request parameters for buffers of req's memory kind. */
static void set_memory_type(ucp_request_param_t *p, const bt_request *req)
{
    if (req->mem != BT_MEM_DEVICE) return;
    p->op_attr_mask |= UCP_OP_ATTR_FIELD_MEMORY_TYPE;
    p->memory_type = UCS_MEMORY_TYPE_CUDA;
}

/* PEER between nodes, NONE inside a node (see the top of this file). */
static ucp_err_handling_mode_t endpoint_err_mode(const bt_world *w, int peer)
{
    return bt_peer_on_my_node(w, peer) ? UCP_ERR_HANDLING_MODE_NONE : UCP_ERR_HANDLING_MODE_PEER;
}

static ucp_ep_h endpoint(bt_backend *b, int peer, bt_status *st)
{
    ucx_state *s = b->impl;
    if (s->eps[peer]) return s->eps[peer];
    ucp_ep_params_t p;
    memset(&p, 0, sizeof p);
    p.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                   UCP_EP_PARAM_FIELD_ERR_HANDLER;
    p.address = (const ucp_address_t *)b->world->peers[peer].addr;
    p.err_mode = endpoint_err_mode(b->world, peer);
    s->peers[peer] = (ucx_peer){b->world, peer};
    p.err_handler.cb = on_endpoint_error;
    p.err_handler.arg = &s->peers[peer];
    ucs_status_t us = ucp_ep_create(s->worker, &p, &s->eps[peer]);
    if (us != UCS_OK) {
        *st = ucx_error(b->world, "endpoint creation", us);
        s->eps[peer] = NULL;
    }
    return s->eps[peer];
}

/* The transport/device of each lane in ucp_ep_print_info's report, whose
 * lane lines read "lane[0]:  3:sysv/memory.0 md[2] ...". */
static void lane_wires(const char *report, char *out, size_t len)
{
    size_t used = 0;
    out[0] = '\0';
    for (const char *line = strstr(report, "lane["); line; line = strstr(line + 1, "lane[")) {
        const char *p = strstr(line, "]:");
        if (!p) break;
        p += 2;
        while (*p == ' ') p++;
        while (*p >= '0' && *p <= '9') p++;
        if (*p++ != ':') continue;
        size_t n = strcspn(p, ". \n");
        char wire[64];
        snprintf(wire, sizeof wire, "%.*s", (int)n, p);
        if (strstr(out, wire)) continue; /* a wire with several lanes is named once */
        int w = snprintf(out + used, len - used, "%s%s", used ? " " : "", wire);
        if (w < 0 || (size_t)w >= len - used) break;
        used += (size_t)w;
    }
}

static bt_status ucx_wires(bt_backend *b, int peer, char *out, size_t len)
{
    bt_status st = BT_OK;
    ucp_ep_h ep = endpoint(b, peer, &st);
    if (!ep) return st;
    char *report = NULL;
    size_t report_len = 0;
    FILE *f = open_memstream(&report, &report_len);
    if (!f) return bt_fail(b->world, BT_ERR_SYS, "out of memory for a UCX endpoint report");
    ucp_ep_print_info(ep, f);
    fclose(f);
    lane_wires(report, out, len);
    free(report);
    return BT_OK;
}

static bt_status ucx_isend(bt_backend *b, bt_request *req, const void *buf)
{
    bt_status st = BT_OK;
    ucp_ep_h ep = endpoint(b, req->world_peer, &st);
    if (!ep) return st;
    ucp_request_param_t p;
    memset(&p, 0, sizeof p);
    set_memory_type(&p, req);
    ucs_status_ptr_t sp = ucp_tag_send_nbx(ep, buf, req->bytes, req->tag, &p);
    if (sp == NULL) {
        req->done = 1;
        req->status = BT_OK;
    } else if (UCS_PTR_IS_ERR(sp)) {
        return peer_error(b->world, req->world_peer, "tag send", UCS_PTR_STATUS(sp));
    } else {
        req->impl = sp;
    }
    return BT_OK;
}

static bt_status ucx_irecv(bt_backend *b, bt_request *req)
{
    ucx_state *s = b->impl;
    ucx_recv *rv = bt_calloc(b->world, sizeof *rv, "a UCX receive");
    if (!rv) return BT_ERR_SYS;
    ucp_request_param_t p;
    memset(&p, 0, sizeof p);
    /* Always get a request back, so the matched length is read one way only. */
    p.op_attr_mask = UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
    set_memory_type(&p, req);
    ucs_status_ptr_t sp =
        ucp_tag_recv_nbx(s->worker, req->buf, req->bytes, req->tag, ~(ucp_tag_t)0, &p);
    if (UCS_PTR_IS_ERR(sp)) {
        free(rv);
        return ucx_error(b->world, "tag receive", UCS_PTR_STATUS(sp));
    }
    rv->ucx_req = sp;
    req->impl = rv;
    return BT_OK;
}

static void finish_recv(bt_backend *b, bt_request *req, ucs_status_t us)
{
    ucx_recv *rv = req->impl;
    req->done = 1;
    if (us == UCS_OK && rv->info.length != req->bytes) us = UCS_ERR_MESSAGE_TRUNCATED;
    if (us == UCS_OK)
        req->status = BT_OK;
    else if (us == UCS_ERR_MESSAGE_TRUNCATED)
        req->status = bt_fail(b->world, BT_ERR_ARG,
                              "message size mismatch from rank %d on channel %d: expected %zu "
                              "bytes, got %zu",
                              req->world_peer, req->channel, req->bytes, (size_t)rv->info.length);
    else
        req->status = peer_error(b->world, req->world_peer, "receive", us);
    if (rv->ucx_req) ucp_request_free(rv->ucx_req);
    free(rv);
    req->impl = NULL;
}

static void ucx_test(bt_backend *b, bt_request *req)
{
    if (req->done) return;
    if (req->kind == BT_REQ_SEND) {
        ucs_status_t us = ucp_request_check_status(req->impl);
        if (us == UCS_INPROGRESS) return;
        ucp_request_free(req->impl);
        req->impl = NULL;
        req->done = 1;
        req->status = us == UCS_OK ? BT_OK : peer_error(b->world, req->world_peer, "send", us);
        return;
    }
    ucx_recv *rv = req->impl;
    ucs_status_t us = ucp_tag_recv_request_test(rv->ucx_req, &rv->info);
    if (us != UCS_INPROGRESS) finish_recv(b, req, us);
}

static void ucx_cancel(bt_backend *b, bt_request *req)
{
    ucx_state *s = b->impl;
    void *handle = req->kind == BT_REQ_SEND ? req->impl : (req->impl ? ((ucx_recv *)req->impl)->ucx_req : NULL);
    if (handle) {
        ucp_request_cancel(s->worker, handle);
        ucp_request_free(handle);
    }
    if (req->kind == BT_REQ_RECV) free(req->impl);
    req->impl = NULL;
}

static void ucx_progress(bt_backend *b)
{
    ucx_state *s = b->impl;
    while (ucp_worker_progress(s->worker)) {}
}

static bt_status wait_ucx(bt_backend *b, ucs_status_ptr_t sp, const char *what)
{
    ucx_state *s = b->impl;
    if (sp == NULL) return BT_OK;
    if (UCS_PTR_IS_ERR(sp)) return ucx_error(b->world, what, UCS_PTR_STATUS(sp));
    double deadline = bt_now() + b->world->opt.timeout_s;
    ucs_status_t us;
    while ((us = ucp_request_check_status(sp)) == UCS_INPROGRESS) {
        ucp_worker_progress(s->worker);
        if (atomic_load(&b->world->failed) || bt_now() > deadline) {
            ucp_request_cancel(s->worker, sp);
            ucp_request_free(sp);
            return atomic_load(&b->world->failed)
                       ? (bt_status)atomic_load(&b->world->failed)
                       : bt_fail(b->world, BT_ERR_TIMEOUT, "UCX %s timed out", what);
        }
    }
    ucp_request_free(sp);
    return us == UCS_OK ? BT_OK : ucx_error(b->world, what, us);
}

static bt_status ucx_flush(bt_backend *b)
{
    ucx_state *s = b->impl;
    ucp_request_param_t p;
    memset(&p, 0, sizeof p);
    return wait_ucx(b, ucp_worker_flush_nbx(s->worker, &p), "flush");
}

static void ucx_finalize(bt_backend *b)
{
    ucx_state *s = b->impl;
    for (int r = 0; s->eps && r < b->world->size; r++) {
        if (!s->eps[r]) continue;
        /* By now every rank has finished or the job is failing: nothing more
         * will cross this endpoint, so close without waiting for the peer. */
        ucp_request_param_t p;
        memset(&p, 0, sizeof p);
        p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
        p.flags = UCP_EP_CLOSE_FLAG_FORCE;
        ucs_status_ptr_t sp = ucp_ep_close_nbx(s->eps[r], &p);
        if (sp && !UCS_PTR_IS_ERR(sp)) {
            while (ucp_request_check_status(sp) == UCS_INPROGRESS) ucp_worker_progress(s->worker);
            ucp_request_free(sp);
        }
    }
    free(s->eps);
    free(s->peers);
    if (s->address) ucp_worker_release_address(s->worker, s->address);
    if (s->worker) ucp_worker_destroy(s->worker);
    if (s->context) ucp_cleanup(s->context);
    free(s);
    free(b);
}

/* One table per memory capability; the functions are the same. */
#define UCX_OPS(kinds)                                                                             \
    {                                                                                              \
        .name = "ucx", .mem_kinds = (kinds), .isend = ucx_isend, .irecv = ucx_irecv,               \
        .test = ucx_test, .cancel = ucx_cancel, .progress = ucx_progress, .flush = ucx_flush,      \
        .finalize = ucx_finalize, .group_end = NULL, .wires = ucx_wires,                          \
    }
static const bt_backend_ops ucx_ops = UCX_OPS(BT_MEM_BIT(BT_MEM_HOST));
static const bt_backend_ops ucx_cuda_ops = UCX_OPS(BT_MEM_BIT(BT_MEM_HOST) | BT_MEM_BIT(BT_MEM_DEVICE));

/* Whether this UCX can move CUDA memory itself. */
static int query_cuda(ucp_context_h context)
{
    const char *env = getenv("BURST_UCX_CUDA");
    if (env && strcmp(env, "0") == 0) return 0;
    ucp_context_attr_t attr;
    memset(&attr, 0, sizeof attr);
    attr.field_mask = UCP_ATTR_FIELD_MEMORY_TYPES;
    if (ucp_context_query(context, &attr) != UCS_OK) return 0;
    return (attr.memory_types & UCS_BIT(UCS_MEMORY_TYPE_CUDA)) != 0;
}

int bt_backend_ucx_cuda(const bt_backend *b) { return b->ops == &ucx_cuda_ops; }

bt_status bt_backend_ucx_create(bt_world *w, bt_backend **out, unsigned char **addr,
                                size_t *addr_len)
{
    bt_backend *b = bt_calloc(w, sizeof *b, "the UCX backend");
    ucx_state *s = b ? bt_calloc(w, sizeof *s, "the UCX backend") : NULL;
    *out = NULL;
    if (!s) {
        free(b);
        return BT_ERR_SYS;
    }
    b->ops = &ucx_ops;
    b->world = w;
    b->impl = s;

    ucp_config_t *config;
    ucs_status_t us = ucp_config_read(NULL, NULL, &config);
    if (us == UCS_OK) {
        ucp_params_t params;
        memset(&params, 0, sizeof params);
        params.field_mask = UCP_PARAM_FIELD_FEATURES;
        params.features = UCP_FEATURE_TAG;
        us = ucp_init(&params, config, &s->context);
        ucp_config_release(config);
    }
    if (us == UCS_OK && query_cuda(s->context)) b->ops = &ucx_cuda_ops;
    if (us == UCS_OK) {
        ucp_worker_params_t wp;
        memset(&wp, 0, sizeof wp);
        wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
        wp.thread_mode = UCS_THREAD_MODE_SINGLE;
        us = ucp_worker_create(s->context, &wp, &s->worker);
    }
    if (us == UCS_OK) us = ucp_worker_get_address(s->worker, &s->address, &s->address_len);
    if (us != UCS_OK) {
        bt_status st = ucx_error(w, "initialisation", us);
        ucx_finalize(b);
        return st;
    }
    *addr = (unsigned char *)s->address;
    *addr_len = s->address_len;
    *out = b;
    return BT_OK;
}

bt_status bt_backend_ucx_connect(bt_backend *b)
{
    ucx_state *s = b->impl;
    size_t n = (size_t)b->world->size;
    s->eps = bt_calloc(b->world, n * sizeof *s->eps, "the UCX endpoints");
    s->peers = s->eps ? bt_calloc(b->world, n * sizeof *s->peers, "the UCX endpoints") : NULL;
    if (!s->peers) return BT_ERR_SYS;
    return BT_OK;
}
