/* rendezvous.c: wire-up through rank 0 over TCP. Every rank connects to rank 0
 * and presents the job's secret, its launch rank, its node and its backend
 * address; rank 0 refuses peers without the secret, orders the ranks
 * node-major, and sends everyone the table. The sockets stay open afterwards
 * as the control plane (control.c). Every message length is bounded and every
 * wait has a deadline that names what it waited for. */
#define _GNU_SOURCE
#include "config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "transport/internal.h"
#include "transport/launch.h"
#include "transport/wire.h"

enum { MAX_ADDR_BYTES = 1 << 20 };
enum { HELLO_OK = 0, HELLO_BAD_SECRET, HELLO_BAD_RANK, HELLO_DUP_RANK, HELLO_BAD_SIZE };

static const char *const hello_refusal[] = {
    "ok", "wrong secret", "rank out of range", "rank already connected", "world size differs",
};

struct hello {
    char magic[4];
    uint32_t version;
    int32_t rank, size;
    uint32_t addr_len;
    char node[256];
    char job[64];
    char secret[129];
    char pad[3];
};

struct table_entry {
    int32_t launch_rank, node, local_rank;
    uint32_t addr_len;
};

int bt_tcp_listen(int port, int *bound_port, char *err, size_t err_len)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        snprintf(err, err_len, "socket: %s", strerror(errno));
        return -1;
    }
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    sa.sin_addr.s_addr = htonl(INADDR_ANY);
    if (bind(fd, (struct sockaddr *)&sa, sizeof sa) != 0 || listen(fd, 1024) != 0) {
        snprintf(err, err_len, "rank 0 cannot listen on TCP port %d: %s%s", port, strerror(errno),
                 errno == EADDRINUSE ? " (set BURST_ROOT_PORT to a free port)" : "");
        close(fd);
        return -1;
    }
    socklen_t len = sizeof sa;
    getsockname(fd, (struct sockaddr *)&sa, &len);
    if (bound_port) *bound_port = ntohs(sa.sin_port);
    return fd;
}

static int tcp_connect(const char *host, int port, double deadline, char *why, size_t why_len)
{
    char service[16];
    snprintf(service, sizeof service, "%d", port);
    struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *res = NULL;
    int gai = getaddrinfo(host, service, &hints, &res);
    if (gai != 0) {
        snprintf(why, why_len, "cannot resolve %s: %s", host, gai_strerror(gai));
        return -1;
    }
    int fd = -1;
    while (bt_now() < deadline) {
        fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd >= 0 && connect(fd, res->ai_addr, res->ai_addrlen) == 0) break;
        snprintf(why, why_len, "%s", strerror(errno));
        if (fd >= 0) close(fd);
        fd = -1;
        struct timespec nap = {0, 50 * 1000 * 1000};
        nanosleep(&nap, NULL);
    }
    freeaddrinfo(res);
    if (fd >= 0) {
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    }
    return fd;
}

/* Reads or writes exactly len bytes before the deadline: 0 on success, -1 on
 * EOF or error, -2 on timeout. */
int bt_wire_io(int fd, void *buf, size_t len, int write_it, double deadline)
{
    char *p = buf;
    while (len > 0) {
        double left = deadline - bt_now();
        if (left <= 0) return -2;
        struct pollfd pfd = {fd, write_it ? POLLOUT : POLLIN, 0};
        int pr = poll(&pfd, 1, (int)(left * 1000) + 1);
        if (pr < 0 && errno == EINTR) continue;
        if (pr < 0) return -1;
        if (pr == 0) continue;
        ssize_t n = write_it ? send(fd, p, len, MSG_NOSIGNAL) : recv(fd, p, len, 0);
        if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
        if (n <= 0) return -1;
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

static int secrets_equal(const char *a, const char *b)
{
    size_t la = strnlen(a, 128), lb = strnlen(b, 128);
    unsigned diff = (unsigned)(la ^ lb);
    for (size_t i = 0; i < la && i < lb; i++) diff |= (unsigned char)(a[i] ^ b[i]);
    return diff == 0;
}

/* Node-major order: nodes by their smallest launch rank, ranks by launch rank. */
static void order_node_major(bt_world *w, struct hello *hellos, unsigned char **addrs)
{
    int size = w->size, n_nodes = 0;
    int *node_of = malloc((size_t)size * sizeof(int));
    for (int r = 0; r < size; r++) {
        node_of[r] = -1;
        for (int q = 0; q < r; q++)
            if (strcmp(hellos[q].node, hellos[r].node) == 0) {
                node_of[r] = node_of[q];
                break;
            }
        if (node_of[r] < 0) node_of[r] = n_nodes++;
    }
    int next = 0;
    for (int node = 0; node < n_nodes; node++) {
        int local = 0;
        for (int r = 0; r < size; r++) {
            if (node_of[r] != node) continue;
            bt_peer_info *p = &w->peers[next++];
            p->node = node;
            p->local_rank = local++;
            p->launch_rank = r;
            p->addr_len = hellos[r].addr_len;
            p->addr = addrs[r];
        }
    }
    free(node_of);
}

static void finish_topology(bt_world *w)
{
    w->n_nodes = 0;
    for (int r = 0; r < w->size; r++) {
        if (w->peers[r].launch_rank == w->ident.rank) w->rank = r;
        if (w->peers[r].node + 1 > w->n_nodes) w->n_nodes = w->peers[r].node + 1;
    }
    w->node = w->peers[w->rank].node;
    w->local_rank = w->peers[w->rank].local_rank;
    int *per_node = calloc((size_t)w->n_nodes, sizeof(int));
    for (int r = 0; r < w->size; r++) per_node[w->peers[r].node]++;
    w->local_size = per_node[w->node];
    for (int n = 0; n < w->n_nodes; n++)
        if (per_node[n] != per_node[0]) w->local_size = -1;
    free(per_node);
}

static bt_status root_accept_all(bt_world *w, int listen_fd, struct hello *hellos,
                                 unsigned char **addrs, int *fds, double deadline)
{
    int missing = w->size - 1;
    while (missing > 0) {
        double left = deadline - bt_now();
        struct pollfd pfd = {listen_fd, POLLIN, 0};
        int pr = left > 0 ? poll(&pfd, 1, (int)(left * 1000) + 1) : 0;
        if (pr < 0 && errno == EINTR) continue;
        if (pr <= 0 && bt_now() >= deadline) {
            char list[256] = "";
            size_t n = 0;
            for (int r = 1; r < w->size && n + 16 < sizeof list; r++)
                if (fds[r] < 0) n += (size_t)snprintf(list + n, sizeof list - n, " %d", r);
            return bt_fail(w, BT_ERR_TIMEOUT,
                           "rendezvous: timed out after %.0f s waiting for %d of %d ranks to "
                           "connect to rank 0 on port %d (missing:%s)",
                           w->opt.timeout_s, missing, w->size, w->ident.root_port, list);
        }
        if (pr <= 0) continue;
        struct sockaddr_in from;
        socklen_t from_len = sizeof from;
        int fd = accept4(listen_fd, (struct sockaddr *)&from, &from_len, SOCK_CLOEXEC);
        if (fd < 0) continue;
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        char who[64];
        snprintf(who, sizeof who, "%s:%d", inet_ntoa(from.sin_addr), ntohs(from.sin_port));
        /* A peer gets a few seconds to introduce itself, so a silent connection
         * cannot stall the whole job. */
        double hello_deadline = bt_now() + 10.0;
        struct hello h;
        if (bt_wire_io(fd, &h, sizeof h, 0, hello_deadline) != 0 ||
            memcmp(h.magic, "BRST", 4) != 0 || h.version != BT_WIRE_VERSION ||
            h.addr_len > MAX_ADDR_BYTES) {
            fprintf(stderr, "burst: rank 0: refused a connection from %s: not a burst peer\n", who);
            close(fd);
            continue;
        }
        h.secret[sizeof h.secret - 1] = h.node[sizeof h.node - 1] = h.job[sizeof h.job - 1] = 0;
        uint32_t verdict = HELLO_OK;
        if (!secrets_equal(h.secret, w->ident.secret) || strcmp(h.job, w->ident.job_id) != 0)
            verdict = HELLO_BAD_SECRET;
        else if (h.size != w->size)
            verdict = HELLO_BAD_SIZE;
        else if (h.rank <= 0 || h.rank >= w->size)
            verdict = HELLO_BAD_RANK;
        else if (fds[h.rank] >= 0)
            verdict = HELLO_DUP_RANK;
        unsigned char *addr = NULL;
        if (verdict == HELLO_OK) {
            addr = malloc(h.addr_len ? h.addr_len : 1);
            if (bt_wire_io(fd, addr, h.addr_len, 0, hello_deadline) != 0) {
                fprintf(stderr, "burst: rank 0: rank %d from %s hung up during wire-up\n", h.rank,
                        who);
                free(addr);
                close(fd);
                continue;
            }
        }
        bt_wire_io(fd, &verdict, sizeof verdict, 1, hello_deadline);
        if (verdict != HELLO_OK) {
            fprintf(stderr, "burst: rank 0: refused a connection from %s: %s\n", who,
                    hello_refusal[verdict]);
            close(fd);
            continue;
        }
        hellos[h.rank] = h;
        addrs[h.rank] = addr;
        fds[h.rank] = fd;
        missing--;
    }
    return BT_OK;
}

static bt_status root_side(bt_world *w, struct hello *mine, const unsigned char *my_addr)
{
    int size = w->size;
    double deadline = bt_now() + w->opt.timeout_s;
    char err[256];
    int listen_fd = w->ident.root_listen_fd;
    if (listen_fd < 0) listen_fd = bt_tcp_listen(w->ident.root_port, NULL, err, sizeof err);
    if (listen_fd < 0) return bt_fail(w, BT_ERR_SYS, "rendezvous: %s", err);
    struct hello *hellos = calloc((size_t)size, sizeof *hellos);
    unsigned char **addrs = calloc((size_t)size, sizeof *addrs);
    int *fds = malloc((size_t)size * sizeof(int));
    for (int r = 0; r < size; r++) fds[r] = -1;
    hellos[0] = *mine;
    addrs[0] = malloc(mine->addr_len);
    memcpy(addrs[0], my_addr, mine->addr_len);

    bt_status st = root_accept_all(w, listen_fd, hellos, addrs, fds, deadline);
    close(listen_fd);
    if (st == BT_OK) {
        w->peers = calloc((size_t)size, sizeof *w->peers);
        order_node_major(w, hellos, addrs);
        finish_topology(w);
        w->ctl_fds = malloc((size_t)size * sizeof(int));
        for (int r = 0; r < size; r++) w->ctl_fds[r] = fds[w->peers[r].launch_rank];
        for (int r = 1; r < size && st == BT_OK; r++) {
            int fd = w->ctl_fds[r];
            uint32_t n = (uint32_t)size;
            int ok = bt_wire_io(fd, &n, sizeof n, 1, deadline) == 0;
            for (int q = 0; q < size && ok; q++) {
                struct table_entry e = {w->peers[q].launch_rank, w->peers[q].node,
                                        w->peers[q].local_rank, (uint32_t)w->peers[q].addr_len};
                ok = bt_wire_io(fd, &e, sizeof e, 1, deadline) == 0;
            }
            for (int q = 0; q < size && ok; q++)
                ok = bt_wire_io(fd, w->peers[q].addr, w->peers[q].addr_len, 1, deadline) == 0;
            if (!ok)
                st = bt_fail(w, BT_ERR_PEER_LOST, "lost rank %d during wire-up", r);
        }
    } else {
        for (int r = 0; r < size; r++) {
            if (fds[r] >= 0) close(fds[r]);
            free(addrs[r]);
        }
    }
    free(hellos);
    free(addrs);
    free(fds);
    return st;
}

static bt_status client_side(bt_world *w, struct hello *mine, const unsigned char *my_addr)
{
    double deadline = bt_now() + w->opt.timeout_s;
    char why[256] = "no answer";
    int fd = tcp_connect(w->ident.root_host, w->ident.root_port, deadline, why, sizeof why);
    if (fd < 0)
        return bt_fail(w, BT_ERR_TIMEOUT,
                       "rendezvous: cannot reach rank 0 at %s:%d within %.0f s (%s)",
                       w->ident.root_host, w->ident.root_port, w->opt.timeout_s, why);
    uint32_t verdict = 0, n = 0;
    int io = bt_wire_io(fd, mine, sizeof *mine, 1, deadline);
    if (io == 0) io = bt_wire_io(fd, (void *)my_addr, mine->addr_len, 1, deadline);
    if (io == 0) io = bt_wire_io(fd, &verdict, sizeof verdict, 0, deadline);
    if (io == 0 && verdict != HELLO_OK) {
        close(fd);
        return bt_fail(w, verdict == HELLO_BAD_SECRET ? BT_ERR_AUTH : BT_ERR_CONFIG,
                       "rendezvous: rank 0 at %s:%d refused this rank: %s", w->ident.root_host,
                       w->ident.root_port,
                       verdict < sizeof hello_refusal / sizeof *hello_refusal
                           ? hello_refusal[verdict]
                           : "unknown reason");
    }
    if (io == 0) io = bt_wire_io(fd, &n, sizeof n, 0, deadline);
    if (io == 0 && n != (uint32_t)w->size) io = -1;
    if (io == 0) {
        w->peers = calloc((size_t)w->size, sizeof *w->peers);
        for (int q = 0; q < w->size && io == 0; q++) {
            struct table_entry e;
            io = bt_wire_io(fd, &e, sizeof e, 0, deadline);
            if (io == 0 && e.addr_len > MAX_ADDR_BYTES) io = -1;
            if (io != 0) break;
            w->peers[q] = (bt_peer_info){e.node, e.local_rank, e.launch_rank, e.addr_len, NULL};
        }
        for (int q = 0; q < w->size && io == 0; q++) {
            w->peers[q].addr = malloc(w->peers[q].addr_len ? w->peers[q].addr_len : 1);
            io = bt_wire_io(fd, w->peers[q].addr, w->peers[q].addr_len, 0, deadline);
        }
    }
    if (io != 0) {
        close(fd);
        return bt_fail(w, io == -2 ? BT_ERR_TIMEOUT : BT_ERR_PEER_LOST,
                       "rendezvous: %s while waiting for the rank table from rank 0 at %s:%d",
                       io == -2 ? "timed out" : "lost rank 0", w->ident.root_host,
                       w->ident.root_port);
    }
    w->ctl_fd = fd;
    finish_topology(w);
    return BT_OK;
}

bt_status bt_rendezvous(bt_world *w, const unsigned char *my_addr, size_t my_addr_len)
{
    if (my_addr_len > MAX_ADDR_BYTES)
        return bt_fail(w, BT_ERR_SYS, "backend address of %zu bytes is too long", my_addr_len);
    struct hello mine;
    memset(&mine, 0, sizeof mine);
    memcpy(mine.magic, "BRST", 4);
    mine.version = BT_WIRE_VERSION;
    mine.rank = w->ident.rank;
    mine.size = w->size;
    mine.addr_len = (uint32_t)my_addr_len;
    snprintf(mine.node, sizeof mine.node, "%s", w->ident.node_name);
    snprintf(mine.job, sizeof mine.job, "%s", w->ident.job_id);
    snprintf(mine.secret, sizeof mine.secret, "%s", w->ident.secret);
    return w->ident.rank == 0 ? root_side(w, &mine, my_addr) : client_side(w, &mine, my_addr);
}

int bt_launch_listen(int *port, char *err, size_t err_len)
{
    return bt_tcp_listen(0, port, err, err_len);
}

int bt_launch_secret(char out[33]) { return bt_random_hex(out, 16); }
