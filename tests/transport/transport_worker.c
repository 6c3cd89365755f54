/* transport_worker.c: one rank of a transport test, launched by test_transport
 * through `burst run` (or srun). Each scenario checks its results itself
 * against a serial reference computed locally, prints "ok SCENARIO" on rank 0
 * and exits 0, or prints what differed and exits 1 (tests/lib/worker_util.h
 * lists the other exit statuses). */
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "transport/internal.h"
#include "transport/transport.h"
#include "tests/lib/worker_util.h"


/* Deterministic content of message (src, dst, channel, index). */
static unsigned char pattern(int src, int dst, int channel, size_t i)
{
    return (unsigned char)(i * 131u + (unsigned)src * 17u + (unsigned)dst * 7u + (unsigned)channel * 3u);
}

/* Sizes 0, 1, odd and 64 MiB between ring neighbours in both directions on
 * three channels at once, plus many small outstanding messages; then the byte
 * counters must equal what was posted. */
static void scenario_p2p(void)
{
    bt_comm *c = bt_world_comm(world);
    int next = (rank + 1) % size, prev = (rank - 1 + size) % size;
    const size_t sizes[] = {0, 1, 7, 4099, (1u << 20) + 3, 64u << 20};
    const int n_sizes = sizeof sizes / sizeof sizes[0], channels[3] = {0, 1, 2};
    uint64_t expect_sent[3] = {0, 0, 0};
    for (int s = 0; s < n_sizes; s++) {
        size_t bytes = sizes[s];
        unsigned char *out[3][2], *in[3][2];
        bt_request *reqs[12];
        int n = 0;
        for (int k = 0; k < 3; k++) {
            int ch = channels[k];
            for (int dir = 0; dir < 2; dir++) {
                int to = dir == 0 ? next : prev, from = dir == 0 ? prev : next;
                out[k][dir] = malloc(bytes + 1);
                in[k][dir] = malloc(bytes + 1);
                for (size_t i = 0; i < bytes; i++) out[k][dir][i] = pattern(rank, to, ch + 8 * dir, i);
                memset(in[k][dir], 0xEE, bytes + 1);
                must(bt_irecv(c, from, ch + 8 * dir, in[k][dir], bytes, &reqs[n++]), "irecv");
                must(bt_isend(c, to, ch + 8 * dir, out[k][dir], bytes, &reqs[n++]), "isend");
            }
        }
        must(bt_waitall(n, reqs), "waitall");
        for (int k = 0; k < 3; k++)
            for (int dir = 0; dir < 2; dir++) {
                int from = dir == 0 ? prev : next, ch = channels[k] + 8 * dir;
                size_t bad = bytes;
                for (size_t i = 0; i < bytes && bad == bytes; i++)
                    if (in[k][dir][i] != pattern(from, rank, ch, i)) bad = i;
                EXPECT(bad == bytes, "%zu-byte message on channel %d from rank %d differs at byte %zu",
                       bytes, ch, from, bad);
                EXPECT(in[k][dir][bytes] == 0xEE, "receive of %zu bytes wrote past its end", bytes);
                free(out[k][dir]);
                free(in[k][dir]);
            }
    }
    for (int k = 0; k < 3; k++)
        for (int s = 0; s < n_sizes; s++) expect_sent[k] += sizes[s];

    /* 200 outstanding small messages each way on one channel: order is kept. */
    enum { MANY = 200 };
    int got[MANY], sent[MANY];
    bt_request *many[2 * MANY];
    for (int i = 0; i < MANY; i++) {
        sent[i] = rank * 1000 + i;
        must(bt_irecv(c, prev, 3, &got[i], sizeof(int), &many[2 * i]), "irecv");
        must(bt_isend(c, next, 3, &sent[i], sizeof(int), &many[2 * i + 1]), "isend");
    }
    must(bt_waitall(2 * MANY, many), "waitall");
    for (int i = 0; i < MANY; i++)
        EXPECT(got[i] == prev * 1000 + i, "message %d of %d on channel 3 arrived out of order", i, MANY);

    for (int k = 0; k < 3; k++) {
        bt_counter fwd = bt_counter_get(world, channels[k]), bwd = bt_counter_get(world, channels[k] + 8);
        EXPECT(fwd.sent_bytes == expect_sent[k] && bwd.sent_bytes == expect_sent[k] &&
                   fwd.recv_bytes == expect_sent[k] && bwd.recv_bytes == expect_sent[k],
               "channel %d counters: sent %llu, received %llu; expected %llu", channels[k],
               (unsigned long long)fwd.sent_bytes, (unsigned long long)fwd.recv_bytes,
               (unsigned long long)expect_sent[k]);
        EXPECT(fwd.sent_msgs == (uint64_t)n_sizes, "channel %d counted %llu messages, expected %d",
               channels[k], (unsigned long long)fwd.sent_msgs, n_sizes);
    }
    bt_counter c3 = bt_counter_get(world, 3);
    EXPECT(c3.sent_bytes == MANY * sizeof(int) && c3.sent_msgs == MANY, "channel 3 counters");
}

/* Rank r's input element i for the reductions: small integers, so float sums
 * are exact and the reference needs no tolerance. */
static double input(int r, size_t i) { return (double)((r * 37 + (int)(i % 101) * 11) % 97) - 48.0; }

static double reference(size_t i, bt_op op)
{
    double acc = input(0, i);
    for (int r = 1; r < size; r++) {
        double v = input(r, i);
        acc = op == BT_SUM ? acc + v : op == BT_MAX ? (v > acc ? v : acc) : (v < acc ? v : acc);
    }
    return acc;
}

static void fill(void *buf, bt_dtype t, size_t count, int r, size_t offset)
{
    for (size_t i = 0; i < count; i++) {
        double v = input(r, offset + i);
        if (t == BT_F32) ((float *)buf)[i] = (float)v;
        if (t == BT_F64) ((double *)buf)[i] = v;
        if (t == BT_I64) ((int64_t *)buf)[i] = (int64_t)v;
    }
}

static double element(const void *buf, bt_dtype t, size_t i)
{
    return t == BT_F32 ? ((const float *)buf)[i] : t == BT_F64 ? ((const double *)buf)[i]
                                                               : (double)((const int64_t *)buf)[i];
}

static void check_reduced(const char *what, const void *buf, bt_dtype t, bt_op op, size_t count,
                          size_t offset)
{
    for (size_t i = 0; i < count; i++) {
        double want = reference(offset + i, op), got = element(buf, t, i);
        if (got != want) {
            EXPECT(0, "%s (type %d, op %d, %zu elements): element %zu is %g, expected %g", what,
                   (int)t, (int)op, count, offset + i, got, want);
            return;
        }
    }
}

static void scenario_collectives(void)
{
    bt_comm *c = bt_world_comm(world);
    must(bt_barrier(c), "barrier");

    const size_t bcast_sizes[] = {0, 13, 1u << 20};
    for (int root = 0; root < size; root++)
        for (size_t s = 0; s < 3; s++) {
            size_t bytes = bcast_sizes[s];
            unsigned char *buf = malloc(bytes + 1);
            for (size_t i = 0; i < bytes; i++) buf[i] = rank == root ? pattern(root, 0, 0, i) : 0;
            must(bt_bcast(c, buf, bytes, root), "bcast");
            size_t bad = bytes;
            for (size_t i = 0; i < bytes && bad == bytes; i++)
                if (buf[i] != pattern(root, 0, 0, i)) bad = i;
            EXPECT(bad == bytes, "bcast of %zu bytes from root %d differs at byte %zu", bytes, root, bad);
            free(buf);
        }

    const size_t gather_sizes[] = {0, 5, 100000};
    for (size_t s = 0; s < 3; s++) {
        size_t bytes = gather_sizes[s];
        unsigned char *mine = malloc(bytes + 1), *all = malloc(bytes * (size_t)size + 1);
        for (size_t i = 0; i < bytes; i++) mine[i] = pattern(rank, 1, 1, i);
        must(bt_allgather(c, mine, all, bytes), "allgather");
        for (int r = 0; r < size; r++) {
            size_t bad = bytes;
            for (size_t i = 0; i < bytes && bad == bytes; i++)
                if (all[(size_t)r * bytes + i] != pattern(r, 1, 1, i)) bad = i;
            EXPECT(bad == bytes, "allgather of %zu bytes: block of rank %d differs at %zu", bytes, r, bad);
        }
        free(mine);
        free(all);
    }

    const bt_dtype types[] = {BT_F32, BT_F64, BT_I64};
    const bt_op ops[] = {BT_SUM, BT_MAX, BT_MIN};
    const size_t counts[] = {1, 3, (size_t)size + 1, 1000, 100003};
    for (int ti = 0; ti < 3; ti++)
        for (int oi = 0; oi < 3; oi++) {
            bt_dtype t = types[ti];
            bt_op op = ops[oi];
            size_t elem = bt_dtype_size(t);
            for (int ci = 0; ci < 5; ci++) {
                size_t count = counts[ci];
                void *buf = malloc(count * elem);
                fill(buf, t, count, rank, 0);
                must(bt_allreduce(c, buf, count, t, op), "allreduce");
                check_reduced("allreduce", buf, t, op, count, 0);
                fill(buf, t, count, rank, 0);
                must(bt_allreduce_hier(world, buf, count, t, op), "allreduce_hier");
                check_reduced("two-level allreduce", buf, t, op, count, 0);
                free(buf);
            }
            size_t per_rank = 777;
            void *send = malloc(per_rank * (size_t)size * elem), *recv = malloc(per_rank * elem);
            fill(send, t, per_rank * (size_t)size, rank, 0);
            must(bt_reduce_scatter(c, send, recv, per_rank, t, op), "reduce_scatter");
            check_reduced("reduce_scatter", recv, t, op, per_rank, (size_t)rank * per_rank);
            free(send);
            free(recv);
        }
}

/* Sub-communicators: intra-node, inter-node and a DP x CP grid have the right
 * members, and traffic on a sub-communicator never mixes with the world's. */
static void scenario_split(void)
{
    int nodes = bt_world_n_nodes(world), local = bt_world_local_size(world);
    bt_comm *intra, *inter;
    must(bt_comm_intra_node(world, &intra), "intra split");
    must(bt_comm_inter_node(world, &inter), "inter split");
    EXPECT(bt_comm_size(intra) == local, "intra size %d, expected %d", bt_comm_size(intra), local);
    EXPECT(bt_comm_size(inter) == nodes, "inter size %d, expected %d", bt_comm_size(inter), nodes);
    for (int r = 0; r < bt_comm_size(intra); r++)
        EXPECT(bt_comm_world_rank(intra, r) == bt_world_node(world) * local + r,
               "intra member %d is world rank %d: ranks are not node-major", r,
               bt_comm_world_rank(intra, r));
    for (int r = 0; r < bt_comm_size(inter); r++)
        EXPECT(bt_comm_world_rank(inter, r) == r * local + bt_world_local_rank(world),
               "inter member %d is world rank %d", r, bt_comm_world_rank(inter, r));

    /* Same channel, world and intra at once, in opposite directions. */
    bt_comm *w = bt_world_comm(world);
    int wn = (rank + 1) % size, wp = (rank - 1 + size) % size;
    int ir = bt_comm_rank(intra), is = bt_comm_size(intra);
    int in_world = -1, in_intra = -1, out_world = 1000 + rank, out_intra = 2000 + rank;
    bt_request *reqs[4];
    must(bt_irecv(w, wp, 0, &in_world, sizeof(int), &reqs[0]), "irecv");
    must(bt_irecv(intra, (ir + 1) % is, 0, &in_intra, sizeof(int), &reqs[1]), "irecv");
    must(bt_isend(intra, (ir - 1 + is) % is, 0, &out_intra, sizeof(int), &reqs[2]), "isend");
    must(bt_isend(w, wn, 0, &out_world, sizeof(int), &reqs[3]), "isend");
    must(bt_waitall(4, reqs), "waitall");
    EXPECT(in_world == 1000 + wp, "world message mixed up: got %d", in_world);
    EXPECT(in_intra == 2000 + bt_comm_world_rank(intra, (ir + 1) % is), "intra message mixed up: got %d",
           in_intra);

    for (int cp = 1; cp <= size; cp++) {
        if (size % cp) continue;
        bt_comm *dp_comm, *cp_comm;
        must(bt_comm_grid(world, size / cp, cp, &dp_comm, &cp_comm), "grid");
        EXPECT(bt_comm_size(cp_comm) == cp && bt_comm_rank(cp_comm) == rank % cp, "cp group");
        EXPECT(bt_comm_size(dp_comm) == size / cp && bt_comm_rank(dp_comm) == rank / cp, "dp group");
        int64_t v = rank;
        must(bt_allreduce(cp_comm, &v, 1, BT_I64, BT_SUM), "cp allreduce");
        int64_t base = (rank / cp) * cp;
        EXPECT(v == cp * base + cp * (cp - 1) / 2, "cp=%d group sum %lld", cp, (long long)v);
        bt_comm_free(dp_comm);
        bt_comm_free(cp_comm);
    }
    bt_comm_free(intra);
    bt_comm_free(inter);
}

/* ------------------------------------------------------------------ all-to-all */

/* The bytes member src of an all-to-all sends member dst of n: uneven, zero for
 * some pairs, and large to the next member (to itself on one rank). */
static size_t uneven_block(int src, int dst, int n)
{
    return dst == (src + 1) % n ? 100003u + (size_t)src : (size_t)(3 * src + 5 * dst) % 11;
}

/* An all-to-all's layout on one member: block j's bytes and offset on each
 * side (j the peer), the buffers' sizes. */
typedef struct {
    size_t *send_bytes, *send_off, *recv_bytes, *recv_off;
    size_t send_total, recv_total;
} a2a_layout;

/* Offsets for blocks of bytes[n]: packed in member order (gaps 0), or in
 * reverse member order with 1 + j % 3 bytes before block j; the end. */
static size_t place_blocks(int n, const size_t *bytes, size_t *off, int gaps)
{
    size_t at = 0;
    for (int k = 0; k < n; k++) {
        int j = gaps ? n - 1 - k : k;
        at += gaps ? 1 + (size_t)j % 3 : 0;
        off[j] = at;
        at += bytes[j];
    }
    return at;
}

/* Member me's layout in c of n members: equal blocks of `equal` bytes
 * packed (bt_alltoall_mem's), or uneven_block's with gaps. */
static a2a_layout a2a_plan(int n, int me, size_t equal, int uneven)
{
    a2a_layout l;
    l.send_bytes = malloc(4 * (size_t)n * sizeof(size_t));
    l.send_off = l.send_bytes + n, l.recv_bytes = l.send_off + n, l.recv_off = l.recv_bytes + n;
    for (int j = 0; j < n; j++) {
        l.send_bytes[j] = uneven ? uneven_block(me, j, n) : equal;
        l.recv_bytes[j] = uneven ? uneven_block(j, me, n) : equal;
    }
    l.send_total = place_blocks(n, l.send_bytes, l.send_off, uneven);
    l.recv_total = place_blocks(n, l.recv_bytes, l.recv_off, uneven);
    return l;
}

enum { A2A_GUARD = 16, A2A_UNTOUCHED = 0xEE, A2A_GAP = 0x5A };

/* What this rank's all-to-alls carried: bytes sent and received, messages
 * each way (one per member, empty blocks too). */
typedef struct {
    size_t sent, received;
    int msgs;
} a2a_count;

/* One all-to-all over c (salt tells the cases apart in the content), checked
 * to the byte against pattern(world rank of the sender, of the receiver,
 * salt): every block received, every byte around them (the gaps and a guard
 * past the end) untouched, the send buffer unchanged; added to *count. */
static void a2a_check(bt_comm *c, size_t equal, int uneven, int salt, const char *name,
                      a2a_count *count)
{
    int n = bt_comm_size(c), me = bt_comm_rank(c), my_world = bt_comm_world_rank(c, me);
    a2a_layout l = a2a_plan(n, me, equal, uneven);
    size_t recv_len = l.recv_total + A2A_GUARD;
    unsigned char *send = malloc(l.send_total + A2A_GUARD), *recv = malloc(recv_len);
    unsigned char *expect = malloc(recv_len), *sent = malloc(l.send_total + 1);
    memset(send, A2A_GAP, l.send_total + A2A_GUARD);
    memset(recv, A2A_UNTOUCHED, recv_len);
    memset(expect, A2A_UNTOUCHED, recv_len);
    for (int j = 0; j < n; j++) {
        int wj = bt_comm_world_rank(c, j);
        for (size_t i = 0; i < l.send_bytes[j]; i++)
            send[l.send_off[j] + i] = pattern(my_world, wj, salt, i);
        for (size_t i = 0; i < l.recv_bytes[j]; i++)
            expect[l.recv_off[j] + i] = pattern(wj, my_world, salt, i);
        count->sent += l.send_bytes[j];
        count->received += l.recv_bytes[j];
    }
    count->msgs += n;
    memcpy(sent, send, l.send_total);
    bt_status st = uneven ? bt_alltoallv_mem(c, send, l.send_bytes, l.send_off, recv, l.recv_bytes,
                                             l.recv_off, BT_MEM_HOST)
                          : bt_alltoall_mem(c, send, recv, equal, BT_MEM_HOST);
    must(st, uneven ? "alltoallv" : "alltoall");
    size_t bad = recv_len;
    for (size_t i = 0; i < recv_len && bad == recv_len; i++)
        if (recv[i] != expect[i]) bad = i;
    EXPECT(bad == recv_len,
           "%s all-to-all (%s, %zu bytes received): byte %zu is 0x%02x, expected 0x%02x", name,
           uneven ? "uneven blocks with gaps" : "equal blocks", l.recv_total, bad,
           bad < recv_len ? recv[bad] : 0, bad < recv_len ? expect[bad] : 0);
    EXPECT(memcmp(sent, send, l.send_total) == 0, "%s all-to-all wrote into its send buffer", name);
    free(send), free(recv), free(expect), free(sent), free(l.send_bytes);
}

/* Equal blocks of 0, 1, 7 and 100003 bytes, then uneven ones with gaps, over c. */
static void a2a_cases(bt_comm *c, const char *name, a2a_count *count)
{
    static const size_t equal[] = {0, 1, 7, 100003};
    for (int k = 0; k < 4; k++) a2a_check(c, equal[k], 0, k, name, count);
    a2a_check(c, 0, 1, 4, name, count);
}

/* Refused with BT_ERR_ARG, the world not failed: inside a group, in place
 * (a receive block over a send block), receive blocks that overlap, a
 * receive block in no buffer, missing arrays. */
static void a2a_misuse(bt_comm *c)
{
    int n = bt_comm_size(c);
    size_t *zero = calloc(4 * (size_t)n, sizeof(size_t)), *bytes = zero + 2 * n,
           *off = zero + 3 * n;
    unsigned char buf[64];
    must(bt_group_start(world), "group start");
    EXPECT(bt_alltoall_mem(c, buf, buf + 32, 0, BT_MEM_HOST) == BT_ERR_ARG,
           "an all-to-all ran inside a group");
    must(bt_group_end(world), "group end");
    EXPECT(bt_alltoall_mem(c, buf, buf, 1, BT_MEM_HOST) == BT_ERR_ARG,
           "an all-to-all in place was accepted");
    bytes[0] = 2;
    EXPECT(bt_alltoallv_mem(c, NULL, zero, zero + n, NULL, bytes, off, BT_MEM_HOST) == BT_ERR_ARG,
           "a receive block of a NULL buffer was accepted");
    if (n > 1) {
        bytes[1] = 2, off[1] = 1; /* [0, 2) and [1, 3) */
        EXPECT(bt_alltoallv_mem(c, NULL, zero, zero + n, buf, bytes, off, BT_MEM_HOST) ==
                   BT_ERR_ARG,
               "overlapping receive blocks were accepted");
    }
    EXPECT(bt_alltoallv_mem(c, buf, NULL, off, buf + 32, bytes, off, BT_MEM_HOST) == BT_ERR_ARG,
           "an all-to-all without its send sizes was accepted");
    EXPECT(atomic_load(&world->failed) == 0, "a refused all-to-all failed the world: %s",
           bt_world_error(world));
    free(zero);
}

/* The all-to-all over the world and over groups of 2, 3 and 1 consecutive
 * ranks (inside a node where they fit), checked to the byte; every byte and
 * message it carried counted on its channel. */
static void scenario_alltoall(void)
{
    bt_comm *wc = bt_world_comm(world);
    a2a_misuse(wc);
    bt_counter_reset(world);
    a2a_count count = {0, 0, 0};
    a2a_cases(wc, "world", &count);
    static const int groups[] = {2, 3, 1};
    for (int g = 0; g < 3; g++) {
        bt_comm *sub;
        must(bt_comm_split(wc, rank / groups[g], rank, &sub), "split");
        char name[32];
        snprintf(name, sizeof name, "group of %d", bt_comm_size(sub));
        a2a_cases(sub, name, &count);
        bt_comm_free(sub);
    }
    bt_counter ch = bt_counter_get(world, BT_CHANNEL_ALLTOALL);
    EXPECT(ch.sent_bytes == count.sent && ch.recv_bytes == count.received &&
               ch.sent_msgs == (uint64_t)count.msgs && ch.recv_msgs == (uint64_t)count.msgs,
           "channel %d counted %llu bytes in %llu messages sent, %llu in %llu received; "
           "expected %zu in %d sent, %zu in %d received",
           BT_CHANNEL_ALLTOALL, (unsigned long long)ch.sent_bytes, (unsigned long long)ch.sent_msgs,
           (unsigned long long)ch.recv_bytes, (unsigned long long)ch.recv_msgs, count.sent,
           count.msgs, count.received, count.msgs);
}

/* Rank 0 expects one byte more from rank 1 than rank 1 sends (5-byte blocks,
 * received 8 bytes apart): rank 0's call fails naming the sizes, as a
 * point-to-point mismatch does. */
static void scenario_alltoall_mismatch(void)
{
    size_t n = (size_t)size, *bytes = malloc(3 * n * sizeof(size_t));
    size_t *send_off = bytes + n, *recv_off = bytes + 2 * n,
           *recv_bytes = malloc(n * sizeof(size_t));
    for (size_t j = 0; j < n; j++) {
        bytes[j] = recv_bytes[j] = 5;
        send_off[j] = 5 * j, recv_off[j] = 8 * j;
    }
    if (rank == 0 && size > 1) recv_bytes[1] = 6;
    unsigned char *send = calloc(n, 5), *recv = calloc(n, 8);
    must(bt_alltoallv_mem(bt_world_comm(world), send, bytes, send_off, recv, recv_bytes, recv_off,
                          BT_MEM_HOST),
         "alltoallv");
    free(send), free(recv), free(bytes), free(recv_bytes);
}

/* The last rank dies just before an all-to-all of 1 MiB blocks: every
 * survivor's call fails naming it. The survivors tell the victim they left
 * the barrier (so that none is still in it when the victim goes), and go
 * straight on. */
static void scenario_alltoall_kill(void)
{
    bt_comm *c = bt_world_comm(world);
    int victim = size - 1, token = 0;
    must(bt_barrier(c), "barrier");
    if (rank == victim) {
        for (int r = 0; r < victim; r++) {
            bt_request *req;
            must(bt_irecv(c, r, 1, &token, sizeof token, &req), "irecv");
            must(bt_wait(&req), "wait for a survivor");
        }
        kill(getpid(), SIGKILL);
    }
    bt_request *ready; /* left to complete inside the all-to-all, or to fail there */
    must(bt_isend(c, victim, 1, &token, sizeof token, &ready), "isend");
    size_t block = 1u << 20;
    unsigned char *send = calloc((size_t)size, block), *recv = calloc((size_t)size, block);
    worker_exit(bt_alltoall_mem(c, send, recv, block, BT_MEM_HOST), "alltoall");
}

/* Waits for a message that victim never sends: the receive fails (the rank is
 * lost) and the worker exits with the reason. */
static void wait_for_lost(int victim)
{
    int x;
    bt_request *r;
    bt_status st = bt_irecv(bt_world_comm(world), victim, 1, &x, sizeof x, &r);
    if (st == BT_OK) st = bt_wait(&r);
    worker_exit(st, "receive from the last rank");
}

/* The last rank dies mid-exchange; every other rank must fail naming it. */
static void scenario_kill(void)
{
    bt_comm *c = bt_world_comm(world);
    int victim = size - 1;
    must(bt_barrier(c), "barrier");
    if (rank == victim) {
        int dummy = 0;
        bt_request *r;
        bt_isend(c, 0, 0, &dummy, sizeof dummy, &r);
        kill(getpid(), SIGKILL);
    }
    /* Everyone else waits for a message the victim will never send. */
    wait_for_lost(victim);
}

/* The last rank dies while rank 0 reads a large message from it: on one node
 * UCX moves it by reading the sender's memory (cma), and that read fails
 * midway. Rank 0 must name the lost rank, not abort inside UCX. */
static void scenario_kill_large(void)
{
    bt_comm *c = bt_world_comm(world);
    int victim = size - 1;
    size_t bytes = 512u << 20;
    unsigned char *buf = malloc(bytes);
    if (!buf) worker_exit(BT_ERR_SYS, "512 MiB buffer");
    memset(buf, rank, bytes);
    bt_request *r = NULL;
    if (rank == 0) must(bt_irecv(c, victim, 4, buf, bytes, &r), "irecv");
    must(bt_barrier(c), "barrier");
    if (rank == victim) {
        must(bt_isend(c, 0, 4, buf, bytes, &r), "isend");
        double until = bt_now() + 0.02;
        int done = 0;
        while (!done && bt_now() < until) bt_test(&r, &done);
        kill(getpid(), SIGKILL);
    }
    if (rank != 0) wait_for_lost(victim);
    worker_exit(bt_wait(&r), "large receive from the last rank");
}

/* Rank 1's data connection to the last rank fails while the last rank stays
 * alive on the control plane (it sleeps; its heartbeats go on): only the
 * report through rank 0 can tell the others that it is lost. The sleeper
 * leaves when its control thread sees rank 0 gone. */
static void scenario_link_lost(void)
{
    bt_comm *c = bt_world_comm(world);
    int victim = size - 1;
    must(bt_barrier(c), "barrier");
    if (rank == victim) sleep(60);
    if (rank == 1) bt_control_link_lost(world, victim, "a data connection failed in a test");
    wait_for_lost(victim);
}

/* The last rank stops (SIGSTOP): no heartbeats, no exit; the others must
 * declare it lost after the timeout. */
static void scenario_hang(void)
{
    bt_comm *c = bt_world_comm(world);
    int victim = size - 1;
    must(bt_barrier(c), "barrier");
    if (rank == victim) raise(SIGSTOP);
    wait_for_lost(victim);
}

/* Rank 0 waits for a message nobody sends: the wait times out and says what
 * it waited for. */
static void scenario_timeout(void)
{
    if (rank == 0 && size > 1) {
        int64_t x;
        bt_request *r;
        bt_status st = bt_irecv(bt_world_comm(world), 1, 5, &x, sizeof x, &r);
        if (st == BT_OK) st = bt_wait(&r);
        worker_report(st, "receive from rank 1");
        exit(st == BT_ERR_TIMEOUT ? WORKER_TIMED_OUT : WORKER_FAILED);
    }
    bt_world_finalize(world);
    exit(0);
}

/* How many wires of a list ("ucx: sysv/memory cma/memory") there are, and
 * how many of them use a transport of set ("|posix|sysv|"). */
static void count_wires(const char *list, const char *set, int *n, int *in_set)
{
    const char *colon = strchr(list, ':');
    char copy[256], *save = NULL;
    snprintf(copy, sizeof copy, "%s", colon ? colon + 1 : list);
    *n = *in_set = 0;
    for (char *wire = strtok_r(copy, " ", &save); wire; wire = strtok_r(NULL, " ", &save)) {
        char key[72];
        snprintf(key, sizeof key, "|%.*s|", (int)strcspn(wire, "/"), wire);
        (*n)++;
        if (strstr(set, key)) (*in_set)++;
    }
}

/* The wires UCX chose: shared memory to the ranks of this node (never TCP:
 * UCX falls back to TCP on loopback when an endpoint asks for more error
 * handling than shared memory offers), the network to other nodes. */
static void scenario_wires(void)
{
    const char *shm = "|posix|sysv|cma|xpmem|knem|", *shm_queues = "|posix|sysv|",
               *net = "|tcp|rc|rc_verbs|rc_mlx5|dc_mlx5|ud|ud_verbs|ud_mlx5|";
    for (int peer = 0; peer < size; peer++) {
        if (peer == rank) continue;
        char wires[256];
        must(bt_world_wires(world, peer, wires, sizeof wires), "wires");
        int same_node = bt_peer_on_my_node(world, peer), n, n_shm, n_queues, n_net;
        count_wires(wires, shm, &n, &n_shm);
        count_wires(wires, shm_queues, &n, &n_queues);
        count_wires(wires, net, &n, &n_net);
        printf("wires %d -> %d (%s): %s\n", rank, peer, same_node ? "same node" : "other node", wires);
        if (same_node)
            EXPECT(n > 0 && n_shm == n, "rank %d to rank %d of its node: %s, not shared memory",
                   rank, peer, wires);
        else
            EXPECT(n_net > 0 && n_queues == 0,
                   "rank %d to rank %d of another node: %s, not the network", rank, peer, wires);
    }
    /* And the wires carry bytes: one round with every peer. */
    must(bt_barrier(bt_world_comm(world)), "barrier");
}

/* Identity: print what this rank learned, for the launcher tests. */
static void scenario_whoami(void)
{
    printf("whoami rank=%d size=%d node=%d nodes=%d local=%d local_size=%d bootstrap=%s\n", rank,
           size, bt_world_node(world), bt_world_n_nodes(world), bt_world_local_rank(world),
           bt_world_local_size(world), bt_world_bootstrap(world));
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: transport_worker "
                        "p2p|collectives|split|kill|hang|link-lost|timeout|whoami|wires|kill-large|"
                        "alltoall|alltoall-mismatch|alltoall-kill\n");
        return WORKER_USAGE;
    }
    worker_init("transport_worker");
    const char *s = argv[1];
    if (strcmp(s, "p2p") == 0) scenario_p2p();
    else if (strcmp(s, "collectives") == 0) scenario_collectives();
    else if (strcmp(s, "split") == 0) scenario_split();
    else if (strcmp(s, "kill") == 0) scenario_kill();
    else if (strcmp(s, "hang") == 0) scenario_hang();
    else if (strcmp(s, "link-lost") == 0) scenario_link_lost();
    else if (strcmp(s, "timeout") == 0) scenario_timeout();
    else if (strcmp(s, "whoami") == 0) scenario_whoami();
    else if (strcmp(s, "wires") == 0) scenario_wires();
    else if (strcmp(s, "kill-large") == 0) scenario_kill_large();
    else if (strcmp(s, "alltoall") == 0)
        scenario_alltoall();
    else if (strcmp(s, "alltoall-mismatch") == 0)
        scenario_alltoall_mismatch();
    else if (strcmp(s, "alltoall-kill") == 0)
        scenario_alltoall_kill();
    else {
        fprintf(stderr, "transport_worker: unknown scenario '%s'\n", s);
        return WORKER_USAGE;
    }
    int64_t total_failures = worker_finish();
    if (rank == 0 && total_failures == 0) printf("ok %s on %d ranks\n", s, size);
    return total_failures ? WORKER_FAILED : 0;
}
