/* transport_dev_worker.c: one rank of a device-memory transport test,
 * launched by test_transport_device through `burst run` (or alone, as a world
 * of one). Device memory is the SIMT emulator's (the engine's hooks,
 * src/attn/device_link.h), whose queued copies run only when an event or a
 * stream is waited for, so a staged chunk sent before its copy's event
 * completed carries old bytes.
 * Each scenario checks its results itself, prints "ok SCENARIO on N ranks" on
 * rank 0 and exits 0, or prints what differed and exits 1. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/device.h"
#include "tests/lib/worker_util.h"
#include "src/attn/device_link.h"
#include "transport/internal.h"
#include "transport/transport.h"

static bk_queue default_queue(void)
{
    bk_queue q = {BK_DEVICE, NULL, 0, NULL};
    return q;
}

/* A device buffer holding host[bytes] (bytes may be 0). */
static void *dev_from(const void *host, size_t bytes)
{
    void *d = NULL;
    bk_queue q = default_queue();
    if (bk_device_malloc(bytes ? bytes : 1, &d) != BK_OK ||
        bk_device_upload(&q, d, host, bytes) != BK_OK) {
        fprintf(stderr, "rank %d: cannot make a device buffer of %zu bytes\n", rank, bytes);
        exit(WORKER_FAILED);
    }
    return d;
}

static void host_from(void *host, const void *dev, size_t bytes)
{
    bk_queue q = default_queue();
    if (bk_device_download(&q, host, dev, bytes) != BK_OK) {
        fprintf(stderr, "rank %d: cannot read a device buffer\n", rank);
        exit(WORKER_FAILED);
    }
}

static unsigned char pattern(int src, int dst, int tag, size_t i)
{
    return (unsigned char)(i * 131u + (unsigned)src * 17u + (unsigned)dst * 7u + (unsigned)tag * 29u);
}

static unsigned char *patterned(int src, int dst, int tag, size_t bytes)
{
    unsigned char *h = malloc(bytes + 1);
    for (size_t i = 0; i < bytes; i++) h[i] = pattern(src, dst, tag, i);
    return h;
}

/* Reads dev back and compares it with pattern(src, dst, tag). */
static void check_arrived(const void *dev, size_t bytes, int src, int tag, const char *what)
{
    unsigned char *got = malloc(bytes + 1);
    host_from(got, dev, bytes);
    size_t bad = bytes;
    for (size_t i = 0; i < bytes && bad == bytes; i++)
        if (got[i] != pattern(src, rank, tag, i)) bad = i;
    EXPECT(bad == bytes, "%s: %zu-byte device message from rank %d (tag %d) differs at byte %zu",
           what, bytes, src, tag, bad);
    free(got);
}

static void set_device(void)
{
    bt_device_hooks h = transport_device_hooks(-1);
    must(bt_world_set_device(world, &h), "set device");
}

/* Every peer's path: "copy" to itself, UCX's ("staged" here, "direct" where
 * UCX has CUDA) to the others. */
static void check_paths(void)
{
    bt_comm *c = bt_world_comm(world);
    for (int r = 0; r < size; r++) {
        const char *p = bt_comm_device_path(c, r);
        if (r == rank)
            EXPECT(p && strcmp(p, "copy") == 0, "path to itself is %s", p ? p : "NULL");
        else
            EXPECT(p && (strcmp(p, "staged") == 0 || strcmp(p, "direct") == 0),
                   "path to rank %d is %s", r, p ? p : "NULL");
    }
    if (rank == 0) printf("device path to rank %d: %s\n", size - 1, bt_comm_device_path(c, size - 1));
}

/* One ring step of device messages of `bytes`: to both neighbours on two
 * channels and to itself, every receive posted before any send, in one group. */
static void ring_step(size_t bytes)
{
    bt_comm *c = bt_world_comm(world);
    int next = (rank + 1) % size, prev = (rank - 1 + size) % size;
    enum { N = 5 };
    const int to[N] = {next, prev, next, prev, rank}, channel[N] = {0, 0, 9, 9, 2};
    void *out[N], *in[N];
    bt_request *reqs[2 * N];
    must(bt_group_start(world), "group start");
    for (int k = 0; k < N; k++) {
        int from = to[k] == next ? prev : to[k] == prev ? next : rank;
        unsigned char *zero = calloc(1, bytes + 1);
        in[k] = dev_from(zero, bytes);
        free(zero);
        must(bt_irecv_mem(c, from, channel[k], in[k], bytes, BT_MEM_DEVICE, &reqs[k]), "irecv");
    }
    for (int k = 0; k < N; k++) {
        unsigned char *h = patterned(rank, to[k], channel[k] * 10 + k / 2, bytes);
        out[k] = dev_from(h, bytes);
        free(h);
        must(bt_isend_mem(c, to[k], channel[k], out[k], bytes, BT_MEM_DEVICE, &reqs[N + k]), "isend");
    }
    must(bt_group_end(world), "group end");
    must(bt_waitall(2 * N, reqs), "waitall");
    for (int k = 0; k < N; k++) {
        int from = to[k] == next ? prev : to[k] == prev ? next : rank;
        /* The sender used tag channel * 10 + k / 2 for the message that lands in slot k here:
         * k = 0 (from prev) was the sender's k = 0 (to its next), k = 1 its k = 1. */
        check_arrived(in[k], bytes, from, channel[k] * 10 + k / 2, "ring");
        bk_device_free(in[k]);
        bk_device_free(out[k]);
    }
}

/* Several messages on one channel to one peer, all posted at once, of
 * different sizes (3 to 8 chunks and some bytes; more chunks than a message
 * has slots): chunks of one message must not interleave with another's. */
static void same_channel_in_order(size_t chunk)
{
    bt_comm *c = bt_world_comm(world);
    int next = (rank + 1) % size, prev = (rank - 1 + size) % size;
    enum { M = 6 };
    size_t bytes[M];
    void *out[M], *in[M];
    bt_request *reqs[2 * M];
    for (int i = 0; i < M; i++) {
        bytes[i] = (size_t)(3 + i) * chunk + 7u * (size_t)i + 1;
        unsigned char *h = patterned(rank, next, 100 + i, bytes[i]);
        out[i] = dev_from(h, bytes[i]);
        in[i] = dev_from(h, bytes[i]); /* overwritten by the receive */
        free(h);
        must(bt_isend_mem(c, next, 3, out[i], bytes[i], BT_MEM_DEVICE, &reqs[2 * i]), "isend");
        must(bt_irecv_mem(c, prev, 3, in[i], bytes[i], BT_MEM_DEVICE, &reqs[2 * i + 1]), "irecv");
    }
    must(bt_waitall(2 * M, reqs), "waitall");
    for (int i = 0; i < M; i++) {
        check_arrived(in[i], bytes[i], prev, 100 + i, "same channel");
        bk_device_free(in[i]);
        bk_device_free(out[i]);
    }
}

static void scenario_ring(void)
{
    set_device();
    check_paths();
    size_t chunk = bt_staging_chunk_bytes();
    const size_t sizes[] = {0, 1, chunk - 1, chunk, chunk + 1, 9 * chunk + 123};
    int n_sizes = sizeof sizes / sizeof sizes[0];
    bt_counter_reset(world);
    uint64_t expect = 0;
    for (int s = 0; s < n_sizes; s++) {
        ring_step(sizes[s]);
        expect += 2 * sizes[s];
    }
    bt_counter c0 = bt_counter_get(world, 0);
    EXPECT(c0.sent_bytes == expect && c0.recv_bytes == expect,
           "channel 0 counted %llu bytes sent, %llu received; expected %llu",
           (unsigned long long)c0.sent_bytes, (unsigned long long)c0.recv_bytes,
           (unsigned long long)expect);
    same_channel_in_order(chunk);
    if (rank == 0) printf("chunk %zu bytes\n", chunk);
}

/* ------------------------------------------------------------------ the staging pool */

/* The pool's counts as expected; what says where. */
static void expect_pool(bt_staging_stats got, int reserved, const char *what)
{
    EXPECT(got.reserved == reserved, "%s: %d buffers reserved, expected %d", what, got.reserved,
           reserved);
    EXPECT(got.peak_in_use <= got.reserved + got.grown,
           "%s: %d buffers in use at once, but only %d taken", what, got.peak_in_use,
           got.reserved + got.grown);
}

/* The pool taken up front for the messages a ring step has in flight at once
 * (a receive and a send to each neighbour on two channels: 8 staged messages
 * on 2 and 4 ranks; the messages to itself are copied): the steps, at every
 * size (up to 9 chunks + 123 bytes, more chunks than a message has slots),
 * take no buffer beyond it, and use some of it. On one rank nothing is
 * staged and nothing taken. */
static void scenario_reserve(void)
{
    EXPECT(bt_staging_reserve(world, 1) == BT_ERR_ARG, "a reservation before the device");
    set_device();
    EXPECT(bt_staging_reserve(world, -1) == BT_ERR_ARG, "a reservation of -1 messages");
    must(bt_staging_reserve(world, 8), "reserve");
    bt_staging_stats st = bt_staging_stats_of(world);
    int slots = size > 1 ? st.slots : 0;
    EXPECT(size == 1 || (st.slots >= 1 && st.chunk_bytes == bt_staging_chunk_bytes()),
           "the pool reports %d slots of %zu bytes", st.slots, st.chunk_bytes);
    expect_pool(st, 8 * slots, "after the reservation");
    EXPECT(st.grown == 0 && st.peak_in_use == 0, "%d buffers grown, %d in use before any message",
           st.grown, st.peak_in_use);
    size_t chunk = bt_staging_chunk_bytes();
    const size_t sizes[] = {0, 1, chunk - 1, chunk, chunk + 1, 9 * chunk + 123};
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) ring_step(sizes[k]);
    must(bt_staging_reserve(world, 2), "a smaller reservation");
    st = bt_staging_stats_of(world);
    expect_pool(st, 8 * slots, "after the ring steps and a smaller reservation");
    EXPECT(st.grown == 0, "%d buffers taken in the ring steps beyond the %d reserved", st.grown,
           st.reserved);
    EXPECT(size == 1 || st.peak_in_use > 0, "the ring steps used none of the pool");
    if (rank == 0)
        printf("pool: %d buffers reserved, at most %d in use\n", st.reserved, st.peak_in_use);
}

/* A pool reserved for one message, then six sends and six receives posted at
 * once: the messages take more buffers (each new one only when every buffer
 * is in use, so the peak is the whole pool), and every message arrives. */
static void scenario_outgrow(void)
{
    set_device();
    must(bt_staging_reserve(world, 1), "reserve");
    same_channel_in_order(bt_staging_chunk_bytes());
    bt_staging_stats st = bt_staging_stats_of(world);
    expect_pool(st, st.slots, "after the messages");
    EXPECT(st.grown > 0 && st.peak_in_use == st.reserved + st.grown,
           "%d buffers grown past the %d reserved, %d in use at once", st.grown, st.reserved,
           st.peak_in_use);
    if (rank == 0) printf("pool: %d buffers reserved, %d grown\n", st.reserved, st.grown);
}

/* ------------------------------------------------------------------ collectives */

/* Values whose sums round differently in another order (fractions), so that
 * equal bits mean the same order of reduction. */
static double input(int r, size_t i)
{
    return ((double)((r * 37 + (int)(i % 101) * 11) % 97) - 48.0) * 0.1234567 + 1.0 / (3.0 + r);
}

static void *filled(bt_dtype t, size_t count, int salt)
{
    size_t elem = bt_dtype_size(t);
    unsigned char *h = malloc(count * elem + 1);
    for (size_t i = 0; i < count; i++) {
        double v = input(rank + salt, i);
        if (t == BT_F32) ((float *)h)[i] = (float)v;
        if (t == BT_F64) ((double *)h)[i] = v;
        if (t == BT_I64) ((int64_t *)h)[i] = (int64_t)v;
    }
    return h;
}

/* dev[bytes] equals host[bytes]. */
static void check_same(const void *dev, const void *host, size_t bytes, const char *what)
{
    unsigned char *got = malloc(bytes + 1);
    host_from(got, dev, bytes);
    EXPECT(memcmp(got, host, bytes) == 0, "%s on device memory differs from the host result (%zu bytes)",
           what, bytes);
    free(got);
}

static void collectives_on(bt_comm *c, const char *name)
{
    const bt_dtype types[] = {BT_F32, BT_F64, BT_I64};
    const bt_op ops[] = {BT_SUM, BT_MAX, BT_MIN};
    const size_t counts[] = {1, 7, 30011};
    int n = bt_comm_size(c);
    char what[96];
    for (int ti = 0; ti < 3; ti++)
        for (int oi = 0; oi < 3; oi++)
            for (int ci = 0; ci < 3; ci++) {
                bt_dtype t = types[ti];
                size_t count = counts[ci], bytes = count * bt_dtype_size(t);
                void *host = filled(t, count, 0), *dev = dev_from(host, bytes);
                must(bt_allreduce(c, host, count, t, ops[oi]), "host allreduce");
                must(bt_allreduce_mem(c, dev, count, t, ops[oi], BT_MEM_DEVICE), "device allreduce");
                snprintf(what, sizeof what, "%s allreduce (type %d, op %d, %zu)", name, ti, oi, count);
                check_same(dev, host, bytes, what);
                bk_device_free(dev);
                /* not waited for: off NCCL it runs whole, no request left */
                void *again = filled(t, count, 0);
                dev = dev_from(again, bytes);
                bt_request *req = NULL;
                must(bt_iallreduce_mem(c, dev, count, t, ops[oi], BT_MEM_DEVICE, &req),
                     "device allreduce not waited for");
                EXPECT(req == NULL, "%s: a staged all-reduce left a request", name);
                snprintf(what, sizeof what, "%s iallreduce (type %d, op %d, %zu)", name, ti, oi,
                         count);
                check_same(dev, host, bytes, what);
                free(host), free(again);
                bk_device_free(dev);

                size_t per = count, total = per * (size_t)n * bt_dtype_size(t);
                void *send = filled(t, per * (size_t)n, 1), *hrecv = malloc(bytes + 1);
                void *dsend = dev_from(send, total), *drecv = NULL;
                bk_device_malloc(bytes, &drecv);
                must(bt_reduce_scatter(c, send, hrecv, per, t, ops[oi]), "host reduce-scatter");
                must(bt_reduce_scatter_mem(c, dsend, drecv, per, t, ops[oi], BT_MEM_DEVICE),
                     "device reduce-scatter");
                snprintf(what, sizeof what, "%s reduce-scatter (type %d, op %d, %zu)", name, ti, oi, per);
                check_same(drecv, hrecv, bytes, what);
                free(send), free(hrecv);
                bk_device_free(dsend), bk_device_free(drecv);
            }
    const size_t gather_bytes[] = {1, 5, 100000};
    for (int g = 0; g < 3; g++) {
        size_t bytes = gather_bytes[g], total = bytes * (size_t)n;
        unsigned char *mine = patterned(rank, 0, g, bytes), *all = malloc(total + 1);
        void *dmine = dev_from(mine, bytes), *dall = NULL;
        bk_device_malloc(total, &dall);
        must(bt_allgather(c, mine, all, bytes), "host allgather");
        must(bt_allgather_mem(c, dmine, dall, bytes, BT_MEM_DEVICE), "device allgather");
        snprintf(what, sizeof what, "%s allgather (%zu bytes per rank)", name, bytes);
        check_same(dall, all, total, what);
        free(mine), free(all);
        bk_device_free(dmine), bk_device_free(dall);
    }
}

/* The device collectives (the all-reduce also not waited for) equal the
 * host ones to the bit (the staged ones run piece by piece through three
 * buffers of the staging pool, which the pool's counts show; on one rank
 * nothing is staged). */
static void scenario_collectives(void)
{
    set_device();
    collectives_on(bt_world_comm(world), "world");
    bt_staging_stats pool = bt_staging_stats_of(world);
    EXPECT(size == 1 ? pool.peak_in_use == 0 : pool.peak_in_use >= 3,
           "%d buffers of the staging pool in use at once on %d ranks", pool.peak_in_use, size);
    bt_comm *intra;
    must(bt_comm_intra_node(world, &intra), "intra split");
    collectives_on(intra, "intra-node");
    bt_comm_free(intra);
}

/* ------------------------------------------------------------------ all-to-all */

/* The bytes member src of an all-to-all sends member dst of n: uneven, zero
 * for some pairs, several staging chunks and some bytes to the next member
 * (to itself on one rank). */
static size_t uneven_block(int src, int dst, int n, size_t chunk)
{
    return dst == (src + 1) % n ? 3 * chunk + 123 + (size_t)src : (size_t)(3 * src + 5 * dst) % 11;
}

enum { A2A_GUARD = 16, A2A_UNTOUCHED = 0xEE, A2A_GAP = 0x5A };

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

/* One all-to-all over c on device memory (equal blocks of `equal` bytes
 * through bt_alltoall_mem, or uneven_block's with gaps through
 * bt_alltoallv_mem), read back and compared to the byte with the reference
 * computed here: pattern(world rank of the sender, of the receiver, salt) in
 * every block, every byte around them (gaps, a guard past the end)
 * untouched. Adds the bytes sent to *sent. */
static void a2a_check(bt_comm *c, size_t equal, int uneven, int salt, const char *name,
                      uint64_t *sent)
{
    int n = bt_comm_size(c), me = bt_comm_rank(c), my_world = bt_comm_world_rank(c, me);
    size_t chunk = bt_staging_chunk_bytes(), *sizes = malloc(4 * (size_t)n * sizeof *sizes);
    size_t *send_bytes = sizes, *send_off = sizes + n, *recv_bytes = sizes + 2 * n,
           *recv_off = sizes + 3 * n;
    for (int j = 0; j < n; j++) {
        send_bytes[j] = uneven ? uneven_block(me, j, n, chunk) : equal;
        recv_bytes[j] = uneven ? uneven_block(j, me, n, chunk) : equal;
        *sent += send_bytes[j];
    }
    size_t send_len = place_blocks(n, send_bytes, send_off, uneven) + A2A_GUARD;
    size_t recv_len = place_blocks(n, recv_bytes, recv_off, uneven) + A2A_GUARD;
    unsigned char *send = malloc(send_len), *expect = malloc(recv_len), *got = malloc(recv_len);
    memset(send, A2A_GAP, send_len);
    memset(expect, A2A_UNTOUCHED, recv_len);
    for (int j = 0; j < n; j++) {
        int wj = bt_comm_world_rank(c, j);
        for (size_t i = 0; i < send_bytes[j]; i++)
            send[send_off[j] + i] = pattern(my_world, wj, salt, i);
        for (size_t i = 0; i < recv_bytes[j]; i++)
            expect[recv_off[j] + i] = pattern(wj, my_world, salt, i);
    }
    memset(got, A2A_UNTOUCHED, recv_len);
    void *dsend = dev_from(send, send_len), *drecv = dev_from(got, recv_len);
    bt_status st = uneven ? bt_alltoallv_mem(c, dsend, send_bytes, send_off, drecv, recv_bytes,
                                             recv_off, BT_MEM_DEVICE)
                          : bt_alltoall_mem(c, dsend, drecv, equal, BT_MEM_DEVICE);
    must(st, uneven ? "device alltoallv" : "device alltoall");
    host_from(got, drecv, recv_len);
    size_t bad = recv_len;
    for (size_t i = 0; i < recv_len && bad == recv_len; i++)
        if (got[i] != expect[i]) bad = i;
    EXPECT(bad == recv_len,
           "%s device all-to-all (%s, %zu bytes): byte %zu is 0x%02x, expected 0x%02x", name,
           uneven ? "uneven blocks with gaps" : "equal blocks", recv_len - A2A_GUARD, bad,
           bad < recv_len ? got[bad] : 0, bad < recv_len ? expect[bad] : 0);
    free(send), free(expect), free(got), free(sizes);
    bk_device_free(dsend), bk_device_free(drecv);
}

/* Equal blocks of 0, 1, chunk + 1 and 100003 bytes, then uneven ones with
 * gaps, over c; adds the bytes sent to *sent. */
static void a2a_cases(bt_comm *c, const char *name, uint64_t *sent)
{
    const size_t equal[] = {0, 1, bt_staging_chunk_bytes() + 1, 100003};
    for (int k = 0; k < 4; k++) a2a_check(c, equal[k], 0, k, name, sent);
    a2a_check(c, 0, 1, 4, name, sent);
}

/* Every peer of the world's path, as one letter each ("cnns" on rank 1 of 2
 * nodes of 2 GPUs served by NCCL), for the test to read. */
static void print_paths(void)
{
    char row[64] = {0};
    bt_comm *c = bt_world_comm(world);
    for (int r = 0; r < size && r < (int)sizeof row - 1; r++) {
        const char *p = bt_comm_device_path(c, r);
        row[r] = p ? p[0] : '-';
    }
    printf("rank %d: device paths %s\n", rank, row);
}

/* The device all-to-all over the world, this node's ranks and groups of 2, 3
 * and 1 consecutive ranks, against the reference to the byte; its channel
 * counts what it sent. Over NCCL (nccl: a GPU of its own per rank, the
 * emulated node's BK_EMU_GPUS_PER_NODE, and transport.intra = nccl) the
 * peers of a node are NCCL's, the others staged; else every peer is staged
 * (or direct) and itself a copy. */
static void scenario_alltoall(int nccl)
{
    if (nccl) {
        int gpus = 0, local = bt_world_local_rank(world);
        if (bk_device_use(local, &gpus) != BK_OK) {
            fprintf(stderr, "rank %d: no emulated GPU %d\n", rank, local);
            exit(WORKER_FAILED);
        }
        bt_device_hooks h = transport_device_hooks(local % gpus);
        must(bt_world_set_device(world, &h), "set device");
        for (int r = 0; r < size; r++) {
            const char *p = bt_comm_device_path(bt_world_comm(world), r);
            int local_peer = r != rank && bt_peer_on_my_node(world, r);
            EXPECT(!local_peer || (p && strcmp(p, "nccl") == 0), "path to rank %d of my node: %s",
                   r, p ? p : "NULL");
        }
    } else {
        set_device();
        check_paths();
    }
    print_paths();
    bt_comm *wc = bt_world_comm(world), *intra;
    bt_counter_reset(world);
    uint64_t sent = 0;
    a2a_cases(wc, "world", &sent);
    must(bt_comm_intra_node(world, &intra), "intra split");
    a2a_cases(intra, "node", &sent);
    bt_comm_free(intra);
    static const int groups[] = {2, 3, 1};
    for (int g = 0; g < 3; g++) {
        bt_comm *sub;
        must(bt_comm_split(wc, rank / groups[g], rank, &sub), "split");
        char name[32];
        snprintf(name, sizeof name, "group of %d", bt_comm_size(sub));
        a2a_cases(sub, name, &sent);
        bt_comm_free(sub);
    }
    bt_counter ch = bt_counter_get(world, BT_CHANNEL_ALLTOALL);
    EXPECT(ch.sent_bytes == sent, "channel %d counted %llu bytes sent, expected %llu",
           BT_CHANNEL_ALLTOALL, (unsigned long long)ch.sent_bytes, (unsigned long long)sent);
}

/* ------------------------------------------------------------------ misuse */

/* Calls refused without failing the world: a nested group, an end without a
 * start, a collective inside a group, hooks set twice or incomplete. */
static void scenario_misuse(void)
{
    bt_device_hooks h = transport_device_hooks(-1), broken = transport_device_hooks(-1);
    broken.event_query = NULL;
    EXPECT(bt_world_set_device(world, &broken) == BT_ERR_ARG, "incomplete hooks were accepted");
    set_device();
    EXPECT(bt_world_set_device(world, &h) == BT_ERR_ARG, "hooks were set twice");
    EXPECT(bt_group_end(world) == BT_ERR_ARG, "a group ended that never started");
    must(bt_group_start(world), "group start");
    EXPECT(bt_group_start(world) == BT_ERR_ARG, "a group was nested");
    double x = 1;
    EXPECT(bt_allreduce_mem(bt_world_comm(world), &x, 1, BT_F64, BT_SUM, BT_MEM_HOST) == BT_ERR_ARG,
           "a collective ran inside a group");
    must(bt_group_end(world), "group end");
    EXPECT(bt_comm_device_path(bt_world_comm(world), size) == NULL, "a path to a rank out of range");
}

/* Device memory before bt_world_set_device is refused, naming the backend,
 * the peer and the memory kind; the world then fails (sticky) and every rank
 * leaves with that verdict. A rank whose peer refused first and left may hear
 * of that before it posts: it then names the lost peer (the test checks that
 * some rank printed the refusal itself). */
static void scenario_refuse_no_hooks(void)
{
    int peer = (rank + 1) % size;
    EXPECT(bt_comm_device_path(bt_world_comm(world), peer) == NULL, "a path without hooks");
    char dev[8];
    bt_request *r = NULL;
    bt_status st = bt_isend_mem(bt_world_comm(world), peer, 0, dev, sizeof dev, BT_MEM_DEVICE, &r);
    const char *err = bt_world_error(world);
    char want_peer[32];
    snprintf(want_peer, sizeof want_peer, "rank %d", peer);
    const char *backend = size == 1 ? "self" : "ucx";
    int own = strstr(err, "device memory") && strstr(err, want_peer) && strstr(err, backend);
    int heard = st == BT_ERR_PEER_LOST && strstr(err, "lost") && strstr(err, want_peer);
    EXPECT((st == BT_ERR_ARG || heard) && r == NULL, "device memory without hooks: %s",
           bt_status_name(st));
    EXPECT(own || heard, "the refusal does not name the memory kind, %s and the %s backend: '%s'",
           want_peer, backend, err);
    printf("refused: %s\n", err);
    bt_world_finalize(world); /* failed: returns at once */
    if (failures == 0) printf("ok refuse on rank %d of %d\n", rank, size);
    exit(failures ? WORKER_FAILED : 0);
}

/* A backend that takes device memory only (NCCL's table) refuses host memory
 * (checked directly: NCCL cannot run here). */
static void scenario_refuse_host(void)
{
    static const bt_backend_ops device_only = {.name = "nccl", .mem_kinds = BT_MEM_BIT(BT_MEM_DEVICE)};
    bt_backend b = {&device_only, world, NULL};
    EXPECT(bt_mem_check(world, &b, 0, BT_MEM_DEVICE) == BT_OK, "device memory refused");
    bt_status st = bt_mem_check(world, &b, 0, BT_MEM_HOST);
    const char *err = bt_world_error(world);
    EXPECT(st == BT_ERR_ARG, "host memory to a device-only backend: %s", bt_status_name(st));
    EXPECT(strstr(err, "nccl") && strstr(err, "rank 0") && strstr(err, "host memory"),
           "the refusal does not name the backend, the peer and the kind: '%s'", err);
    printf("refused: %s\n", err);
    bt_world_finalize(world);
    if (failures == 0) printf("ok refuse-host on rank %d of %d\n", rank, size);
    exit(failures ? WORKER_FAILED : 0);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: transport_dev_worker ring|reserve|outgrow|collectives|alltoall|"
                        "alltoall-nccl|misuse|refuse|refuse-host\n");
        return WORKER_USAGE;
    }
    if (!bk_device_available()) {
        fprintf(stderr, "transport_dev_worker: no device backend (%s)\n", bk_device_backend_name());
        return WORKER_FAILED;
    }
    const char *s = argv[1];
    bt_options opt; /* alltoall-nccl: NCCL must serve every node */
    bt_options_default(&opt);
    if (strcmp(s, "alltoall-nccl") == 0) opt.intra = "nccl";
    worker_init_with("transport_dev_worker", &opt);
    if (strcmp(s, "ring") == 0) scenario_ring();
    else if (strcmp(s, "reserve") == 0)
        scenario_reserve();
    else if (strcmp(s, "outgrow") == 0)
        scenario_outgrow();
    else if (strcmp(s, "collectives") == 0) scenario_collectives();
    else if (strcmp(s, "alltoall") == 0)
        scenario_alltoall(0);
    else if (strcmp(s, "alltoall-nccl") == 0)
        scenario_alltoall(1);
    else if (strcmp(s, "misuse") == 0) scenario_misuse();
    else if (strcmp(s, "refuse") == 0) scenario_refuse_no_hooks();
    else if (strcmp(s, "refuse-host") == 0) scenario_refuse_host();
    else {
        fprintf(stderr, "transport_dev_worker: unknown scenario '%s'\n", s);
        return WORKER_USAGE;
    }
    int64_t total_failures = worker_finish();
    if (rank == 0 && total_failures == 0) printf("ok %s on %d ranks\n", s, size);
    return total_failures ? WORKER_FAILED : 0;
}
