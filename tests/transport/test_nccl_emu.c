/* test_nccl_emu.c: the NCCL model of the emulated device (emu/nccl/), through
 * the real nccl.h and cuda_runtime.h, with one process per rank: each case
 * forks its ranks (the parent draws the unique id before), every rank checks
 * its own results and exits 0 or 1 with the reason on stderr, and the parent
 * asserts every rank exited in time, passed, and said what it had to say, and
 * that no shared-memory segment was left behind.
 * Covered: a grouped ring step; the ungrouped rings that deadlock under strict
 * rendezvous, reported after BK_EMU_NCCL_TIMEOUT; collectives on odd sizes
 * (and in place) against values computed here; point-to-point matching in
 * issue order; a peer that aborts or exits; abort with operations pending;
 * size and collective mismatches; an invalid call inside a group; an
 * initialisation that a rank misses or dies in; two ranks on one device; the
 * CUDA calls around NCCL, and a forked child refused the runtime; one order
 * over two communicators, and sends, receives and collectives issued in
 * different orders across them, which fail.
 * A rank's stderr is a file the parent reads; its alarm ends it alone. */
#define _GNU_SOURCE
#include <check.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cuda_runtime.h>
#include <nccl.h>

#include "tests/lib/check_main.h"

enum { MAX_RANKS = 8, RING_BYTES = (1 << 20) + 3 };

/* Loop tests run for _i = 1 and 2: 2 and 4 ranks. */
#define NRANKS (2 * _i)

/* ------------------------------------------------------------------ in a rank */

static double seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void sleep_s(double s)
{
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    nanosleep(&ts, NULL);
}

/* In a rank: a failed expectation says why on stderr and fails the rank. */
#define EXPECT(cond, ...)                                                                          \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "line %d: expected %s: ", __LINE__, #cond);                            \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fputc('\n', stderr);                                                                   \
            return 1;                                                                              \
        }                                                                                          \
    } while (0)

static unsigned char pattern(int rank, size_t i)
{
    return (unsigned char)(i * 131u + (size_t)rank * 17u + (i >> 12));
}

static unsigned char *filled(int rank, size_t n)
{
    unsigned char *p = malloc(n ? n : 1);
    for (size_t i = 0; i < n; i++) p[i] = pattern(rank, i);
    return p;
}

/* Index of the first byte of got[n] that is not the pattern of rank, or -1. */
static long first_wrong(const unsigned char *got, size_t n, int rank)
{
    for (size_t i = 0; i < n; i++)
        if (got[i] != pattern(rank, i)) return (long)i;
    return -1;
}

/* Polls the event until it is no longer pending or limit_s passed. */
static cudaError_t wait_event(cudaEvent_t ev, double limit_s)
{
    double end = seconds() + limit_s;
    cudaError_t e;
    while ((e = cudaEventQuery(ev)) == cudaErrorNotReady && seconds() < end) sleep_s(0.001);
    return e;
}

/* A rank's communicator, stream and event. */
typedef struct {
    ncclComm_t comm;
    cudaStream_t stream;
    cudaEvent_t event;
} rank_ctx;

static int open_ctx(rank_ctx *c, int rank, int nranks, ncclUniqueId id)
{
    ncclResult_t r = ncclCommInitRank(&c->comm, nranks, id, rank);
    EXPECT(r == ncclSuccess, "ncclCommInitRank: %s", ncclGetErrorString(r));
    EXPECT(cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking) == cudaSuccess, "stream");
    EXPECT(cudaEventCreateWithFlags(&c->event, cudaEventDisableTiming) == cudaSuccess, "event");
    return 0;
}

static void close_ctx(rank_ctx *c, int abort)
{
    if (abort)
        ncclCommAbort(c->comm);
    else
        ncclCommDestroy(c->comm);
    cudaEventDestroy(c->event);
    cudaStreamDestroy(c->stream);
}

/* Records the context's event and waits for it to succeed. */
static int completes(rank_ctx *c, double limit_s)
{
    EXPECT(cudaEventRecord(c->event, c->stream) == cudaSuccess, "event record");
    cudaError_t e = wait_event(c->event, limit_s);
    EXPECT(e == cudaSuccess, "the event completed, not %s", cudaGetErrorString(e));
    return 0;
}

/* Records the event and waits until it reports an error, within limit_s;
 * the communicator's asynchronous error must then be want_a or want_b. */
static int fails(rank_ctx *c, double limit_s, ncclResult_t want_a, ncclResult_t want_b)
{
    double t0 = seconds();
    EXPECT(cudaEventRecord(c->event, c->stream) == cudaSuccess, "event record");
    cudaError_t e = wait_event(c->event, limit_s);
    EXPECT(e != cudaSuccess && e != cudaErrorNotReady, "the event failed within %g s, not %s",
           limit_s, cudaGetErrorString(e));
    ncclResult_t async = ncclSuccess;
    EXPECT(ncclCommGetAsyncError(c->comm, &async) == ncclSuccess, "ncclCommGetAsyncError");
    EXPECT(async == want_a || async == want_b, "an asynchronous error %d or %d, not %d (%s)",
           (int)want_a, (int)want_b, (int)async, ncclGetErrorString(async));
    fprintf(stderr, "failed after %.2f s with %s\n", seconds() - t0, ncclGetErrorString(async));
    return 0;
}

/* ------------------------------------------------------------------ scenarios */

typedef int (*scenario)(int rank, int nranks, ncclUniqueId id);

/* Each rank receives from rank-1 and sends to rank+1 in one group. */
static int ring_grouped(int rank, int nranks, ncclUniqueId id)
{
    rank_ctx c;
    if (open_ctx(&c, rank, nranks, id)) return 1;
    int prev = (rank + nranks - 1) % nranks, next = (rank + 1) % nranks;
    unsigned char *send = filled(rank, RING_BYTES), *recv = calloc(1, RING_BYTES);
    EXPECT(ncclGroupStart() == ncclSuccess, "group start");
    EXPECT(ncclRecv(recv, RING_BYTES, ncclUint8, prev, c.comm, c.stream) == ncclSuccess, "recv");
    EXPECT(ncclSend(send, RING_BYTES, ncclUint8, next, c.comm, c.stream) == ncclSuccess, "send");
    EXPECT(ncclGroupEnd() == ncclSuccess, "group end");
    if (completes(&c, 20)) return 1;
    long bad = first_wrong(recv, RING_BYTES, prev);
    EXPECT(bad < 0, "the bytes of rank %d, wrong at %ld", prev, bad);
    close_ctx(&c, 0);
    free(send), free(recv);
    return 0;
}

/* The same ring with each call its own group: every rank waits on a peer
 * whose matching call is queued behind its own first one. */
static int ring_ungrouped(int rank, int nranks, ncclUniqueId id, int recv_first)
{
    rank_ctx c;
    if (open_ctx(&c, rank, nranks, id)) return 1;
    int prev = (rank + nranks - 1) % nranks, next = (rank + 1) % nranks;
    unsigned char *send = filled(rank, RING_BYTES), *recv = calloc(1, RING_BYTES);
    for (int k = 0; k < 2; k++) {
        ncclResult_t r = (k == 0) == (recv_first != 0)
                             ? ncclRecv(recv, RING_BYTES, ncclUint8, prev, c.comm, c.stream)
                             : ncclSend(send, RING_BYTES, ncclUint8, next, c.comm, c.stream);
        EXPECT(r == ncclSuccess, "issue: %s", ncclGetErrorString(r));
    }
    if (fails(&c, 10, ncclSystemError, ncclRemoteError)) return 1;
    double t0 = seconds();
    close_ctx(&c, 1);
    EXPECT(seconds() - t0 < 2, "abort returned promptly, took %.2f s", seconds() - t0);
    free(send), free(recv);
    return 0;
}

static int ring_recv_first(int rank, int nranks, ncclUniqueId id)
{
    return ring_ungrouped(rank, nranks, id, 1);
}

static int ring_send_first(int rank, int nranks, ncclUniqueId id)
{
    return ring_ungrouped(rank, nranks, id, 0);
}

/* A rank alone sends to itself: only inside a group. */
static int self_exchange(int rank, int nranks, ncclUniqueId id)
{
    return ring_grouped(rank, nranks, id);
}

static float f32_value(int rank, size_t i)
{
    return (float)((i % 1024) + (size_t)rank);
}
static double f64_value(int rank, size_t i)
{
    return (double)((i * 7919 + (size_t)rank * 104729) % 100003);
}
static int64_t i64_value(int rank, size_t i)
{
    return (int64_t)((i * 31 + (size_t)rank * 977) % 1001) - 500;
}
static float rs_value(int rank, size_t j)
{
    return (float)((j % 4099) * (size_t)(rank + 1));
}

enum {
    AR_F32 = 300007,
    AR_F64 = 70001,
    AR_I64 = 5003,
    AR_INPLACE = 999,
    RS_F32 = 40009,
    RS_I64 = 3,
    RS_INPLACE = 1001,
    AG_U8 = 100003,
    AG_INPLACE = 3001
};

typedef struct {
    float *ar32_in, *ar32_out, *rs_in, *rs_out, *rs_inplace;
    double *ar64_in, *ar64_out, *inplace;
    int64_t *ari_in, *ari_out, *rsi_in, *rsi_out;
    unsigned char *ag_in, *ag_out, *ag_inplace;
} coll_buffers;

static void coll_fill(coll_buffers *b, int rank, int nranks)
{
    size_t n = (size_t)nranks;
    b->ar32_in = malloc(AR_F32 * sizeof(float)), b->ar32_out = calloc(AR_F32, sizeof(float));
    b->ar64_in = malloc(AR_F64 * sizeof(double)), b->ar64_out = calloc(AR_F64, sizeof(double));
    b->ari_in = malloc(AR_I64 * sizeof(int64_t)), b->ari_out = calloc(AR_I64, sizeof(int64_t));
    b->inplace = malloc(AR_INPLACE * sizeof(double));
    b->rs_in = malloc(n * RS_F32 * sizeof(float)), b->rs_out = calloc(RS_F32, sizeof(float));
    b->rsi_in = malloc(n * RS_I64 * sizeof(int64_t)), b->rsi_out = calloc(RS_I64, sizeof(int64_t));
    b->ag_in = filled(rank, AG_U8), b->ag_out = calloc(n, AG_U8);
    b->rs_inplace = malloc(n * RS_INPLACE * sizeof(float));
    for (size_t j = 0; j < n * RS_INPLACE; j++) b->rs_inplace[j] = rs_value(rank, j);
    b->ag_inplace = calloc(n, AG_INPLACE); /* its own part at rank * AG_INPLACE */
    for (size_t i = 0; i < AG_INPLACE; i++)
        b->ag_inplace[(size_t)rank * AG_INPLACE + i] = pattern(rank, i);
    for (size_t i = 0; i < AR_F32; i++) b->ar32_in[i] = f32_value(rank, i);
    for (size_t i = 0; i < AR_F64; i++) b->ar64_in[i] = f64_value(rank, i);
    for (size_t i = 0; i < AR_I64; i++) b->ari_in[i] = i64_value(rank, i);
    for (size_t i = 0; i < AR_INPLACE; i++) b->inplace[i] = rank * 1000.0 + (double)i;
    for (size_t j = 0; j < n * RS_F32; j++) b->rs_in[j] = rs_value(rank, j);
    for (size_t j = 0; j < n * RS_I64; j++) b->rsi_in[j] = (int64_t)(j * 10) - rank;
}

static void coll_free(coll_buffers *b)
{
    free(b->ar32_in), free(b->ar32_out), free(b->ar64_in), free(b->ar64_out), free(b->ari_in);
    free(b->ari_out), free(b->inplace), free(b->rs_in), free(b->rs_out), free(b->rsi_in);
    free(b->rsi_out), free(b->ag_in), free(b->ag_out), free(b->rs_inplace), free(b->ag_inplace);
}

static int coll_issue(rank_ctx *c, coll_buffers *b, int rank)
{
    ncclComm_t m = c->comm;
    cudaStream_t s = c->stream;
    EXPECT(ncclAllReduce(b->ar32_in, b->ar32_out, AR_F32, ncclFloat32, ncclSum, m, s) == 0,
           "f32 sum");
    EXPECT(ncclAllReduce(b->ar64_in, b->ar64_out, AR_F64, ncclFloat64, ncclMax, m, s) == 0,
           "f64 max");
    /* two in one group: they run in issue order on every rank */
    EXPECT(ncclGroupStart() == 0, "group start");
    EXPECT(ncclAllReduce(b->ari_in, b->ari_out, AR_I64, ncclInt64, ncclMin, m, s) == 0, "i64 min");
    EXPECT(ncclAllReduce(b->inplace, b->inplace, AR_INPLACE, ncclFloat64, ncclSum, m, s) == 0,
           "in place");
    EXPECT(ncclGroupEnd() == 0, "group end");
    EXPECT(ncclReduceScatter(b->rs_in, b->rs_out, RS_F32, ncclFloat32, ncclSum, m, s) == 0,
           "rs f32");
    EXPECT(ncclReduceScatter(b->rsi_in, b->rsi_out, RS_I64, ncclInt64, ncclMax, m, s) == 0,
           "rs i64");
    EXPECT(ncclAllGather(b->ag_in, b->ag_out, AG_U8, ncclUint8, m, s) == 0, "allgather");
    EXPECT(ncclAllReduce(NULL, NULL, 0, ncclFloat32, ncclSum, m, s) == 0, "empty allreduce");
    EXPECT(ncclReduceScatter(b->rs_inplace, b->rs_inplace + (size_t)rank * RS_INPLACE, RS_INPLACE,
                             ncclFloat32, ncclSum, m, s) == 0,
           "in-place reduce-scatter");
    EXPECT(ncclAllGather(b->ag_inplace + (size_t)rank * AG_INPLACE, b->ag_inplace, AG_INPLACE,
                         ncclUint8, m, s) == 0,
           "in-place allgather");
    /* overlapping other than in place: undefined in NCCL, refused here */
    EXPECT(ncclAllReduce(b->ar32_in, b->ar32_in + 1, 8, ncclFloat32, ncclSum, m, s) ==
               ncclInvalidArgument,
           "overlap refused");
    return 0;
}

static int coll_check(coll_buffers *b, int rank, int nranks)
{
    for (size_t i = 0; i < AR_F32; i++) {
        float want = 0;
        for (int q = 0; q < nranks; q++) want += f32_value(q, i);
        EXPECT(b->ar32_out[i] == want, "f32 sum [%zu] = %g, got %g", i, want, b->ar32_out[i]);
    }
    for (size_t i = 0; i < AR_F64; i++) {
        double want = f64_value(0, i);
        for (int q = 1; q < nranks; q++) want = f64_value(q, i) > want ? f64_value(q, i) : want;
        EXPECT(b->ar64_out[i] == want, "f64 max [%zu] = %g, got %g", i, want, b->ar64_out[i]);
    }
    for (size_t i = 0; i < AR_I64; i++) {
        int64_t want = i64_value(0, i);
        for (int q = 1; q < nranks; q++) want = i64_value(q, i) < want ? i64_value(q, i) : want;
        EXPECT(b->ari_out[i] == want, "i64 min [%zu]", i);
    }
    for (size_t i = 0; i < AR_INPLACE; i++) {
        double want = 1000.0 * nranks * (nranks - 1) / 2 + (double)nranks * (double)i;
        EXPECT(b->inplace[i] == want, "in-place sum [%zu] = %g, got %g", i, want, b->inplace[i]);
    }
    for (size_t i = 0; i < RS_F32; i++) {
        size_t j = (size_t)rank * RS_F32 + i;
        float want = 0;
        for (int q = 0; q < nranks; q++) want += rs_value(q, j);
        EXPECT(b->rs_out[i] == want, "reduce-scatter [%zu] = %g, got %g", i, want, b->rs_out[i]);
    }
    for (size_t i = 0; i < RS_I64; i++) {
        int64_t want = (int64_t)(((size_t)rank * RS_I64 + i) * 10); /* rank 0's is the largest */
        EXPECT(b->rsi_out[i] == want, "reduce-scatter max [%zu]", i);
    }
    for (int q = 0; q < nranks; q++) {
        long bad = first_wrong(b->ag_out + (size_t)q * AG_U8, AG_U8, q);
        EXPECT(bad < 0, "allgather: rank %d's part wrong at %ld", q, bad);
        bad = first_wrong(b->ag_inplace + (size_t)q * AG_INPLACE, AG_INPLACE, q);
        EXPECT(bad < 0, "in-place allgather: rank %d's part wrong at %ld", q, bad);
    }
    for (size_t i = 0; i < RS_INPLACE; i++) {
        size_t j = (size_t)rank * RS_INPLACE + i;
        float want = 0;
        for (int q = 0; q < nranks; q++) want += rs_value(q, j);
        EXPECT(b->rs_inplace[j] == want, "in-place reduce-scatter [%zu] = %g, got %g", i, want,
               b->rs_inplace[j]);
    }
    return 0;
}

static int collectives(int rank, int nranks, ncclUniqueId id)
{
    rank_ctx c;
    if (open_ctx(&c, rank, nranks, id)) return 1;
    coll_buffers b;
    coll_fill(&b, rank, nranks);
    if (coll_issue(&c, &b, rank)) return 1;
    EXPECT(cudaStreamSynchronize(c.stream) == cudaSuccess, "stream synchronize");
    if (coll_check(&b, rank, nranks)) return 1;
    close_ctx(&c, 0);
    coll_free(&b);
    return 0;
}

/* Even ranks send two messages to the next rank, each call its own group;
 * the next rank receives two: first matches first. Twice: same sizes, then
 * different sizes. */
static int p2p_issue_order(int rank, int nranks, ncclUniqueId id)
{
    rank_ctx c;
    if (open_ctx(&c, rank, nranks, id)) return 1;
    int sender = rank % 2 == 0, peer = sender ? rank + 1 : rank - 1;
    static const size_t sizes[2][2] = {{1000, 1000}, {70001, 5}};
    for (int round = 0; round < 2; round++) {
        unsigned char *buf[2];
        for (int k = 0; k < 2; k++) {
            size_t n = sizes[round][k];
            buf[k] = sender ? filled(100 + k, n) : calloc(1, n);
            ncclResult_t r = sender ? ncclSend(buf[k], n, ncclUint8, peer, c.comm, c.stream)
                                    : ncclRecv(buf[k], n, ncclUint8, peer, c.comm, c.stream);
            EXPECT(r == ncclSuccess, "issue: %s", ncclGetErrorString(r));
        }
        if (completes(&c, 20)) return 1;
        for (int k = 0; k < 2 && !sender; k++) {
            long bad = first_wrong(buf[k], sizes[round][k], 100 + k);
            EXPECT(bad < 0, "round %d: receive %d got send %d's bytes, wrong at %ld", round, k, k,
                   bad);
        }
        free(buf[0]), free(buf[1]);
    }
    close_ctx(&c, 0);
    return 0;
}

/* A second communicator over the same ranks, its id drawn by the parent
 * (run_ranks) before the ranks fork. */
static ncclUniqueId second_id;

/* Opens the two communicators, each on a stream of its own. */
static int open_two(rank_ctx c[2], int rank, int nranks, ncclUniqueId id)
{
    return open_ctx(&c[0], rank, nranks, id) || open_ctx(&c[1], rank, nranks, second_id);
}

/* Both communicators' operations fail (here or at the peer), then abort. */
static int both_fail(rank_ctx c[2])
{
    for (int k = 0; k < 2; k++) {
        if (fails(&c[k], 10, ncclInvalidUsage, ncclRemoteError)) return 1;
        close_ctx(&c[k], 1);
    }
    return 0;
}

/* Every rank issues the same order over two communicators: ring steps on
 * one, then the other, then one group over both, then a sum on each; all
 * complete with the right bytes. */
static int orders_agree(int rank, int nranks, ncclUniqueId id)
{
    rank_ctx c[2];
    if (open_two(c, rank, nranks, id)) return 1;
    int prev = (rank + nranks - 1) % nranks, next = (rank + 1) % nranks;
    unsigned char *send = filled(rank, 4096), *recv = calloc(1, 4096);
    for (int step = 0; step < 3; step++) {
        EXPECT(ncclGroupStart() == ncclSuccess, "group start");
        for (int k = 0; k < 2; k++)
            if (step == 2 || k == step) {
                EXPECT(ncclRecv(recv, 4096, ncclUint8, prev, c[k].comm, c[k].stream) == 0, "recv");
                EXPECT(ncclSend(send, 4096, ncclUint8, next, c[k].comm, c[k].stream) == 0, "send");
            }
        EXPECT(ncclGroupEnd() == ncclSuccess, "group end");
    }
    float in = 1, out[2] = {0};
    for (int k = 0; k < 2; k++)
        EXPECT(ncclAllReduce(&in, &out[k], 1, ncclFloat32, ncclSum, c[k].comm, c[k].stream) == 0,
               "sum");
    for (int k = 0; k < 2; k++) {
        if (completes(&c[k], 20)) return 1;
        EXPECT(out[k] == (float)nranks, "communicator %d's sum %g", k, out[k]);
        close_ctx(&c[k], 0);
    }
    long bad = first_wrong(recv, 4096, prev);
    EXPECT(bad < 0, "the bytes of rank %d, wrong at %ld", prev, bad);
    free(send), free(recv);
    return 0;
}

/* Even ranks send to the next rank on communicator 0, then on 1; the next
 * rank receives on 1, then on 0. Each communicator has its own stream, so
 * the model's workers would finish both; on a GPU it can deadlock. Every
 * rank's operations fail. */
static int p2p_orders_differ(int rank, int nranks, ncclUniqueId id)
{
    rank_ctx c[2];
    if (open_two(c, rank, nranks, id)) return 1;
    int sender = rank % 2 == 0, peer = sender ? rank + 1 : rank - 1;
    unsigned char buf[2][256] = {{0}};
    for (int i = 0; i < 2; i++) {
        int k = sender ? i : 1 - i;
        ncclResult_t r = sender ? ncclSend(buf[k], 256, ncclUint8, peer, c[k].comm, c[k].stream)
                                : ncclRecv(buf[k], 256, ncclUint8, peer, c[k].comm, c[k].stream);
        EXPECT(r == ncclSuccess, "issue: %s", ncclGetErrorString(r));
    }
    return both_fail(c);
}

/* Rank 0 sums on communicator 0, then on 1; the others on 1, then on 0:
 * every rank's collectives fail. */
static int collective_orders_differ(int rank, int nranks, ncclUniqueId id)
{
    rank_ctx c[2];
    if (open_two(c, rank, nranks, id)) return 1;
    float in = 1, out[2];
    for (int i = 0; i < 2; i++) {
        int k = rank == 0 ? i : 1 - i;
        EXPECT(ncclAllReduce(&in, &out[k], 1, ncclFloat32, ncclSum, c[k].comm, c[k].stream) == 0,
               "sum");
    }
    return both_fail(c);
}

/* Odd ranks wait on a receive from the even rank before them, which aborts
 * its communicator (or, with exit_instead, exits) without sending. */
static int peer_leaves(int rank, int nranks, ncclUniqueId id, int exit_instead)
{
    rank_ctx c;
    if (open_ctx(&c, rank, nranks, id)) return 1;
    if (rank % 2 == 0) {
        sleep_s(0.3);
        if (exit_instead) _exit(0);
        close_ctx(&c, 1);
        return 0;
    }
    unsigned char buf[64];
    EXPECT(ncclRecv(buf, sizeof buf, ncclUint8, rank - 1, c.comm, c.stream) == ncclSuccess, "recv");
    if (fails(&c, 5, ncclRemoteError, ncclRemoteError)) return 1;
    close_ctx(&c, 1);
    return 0;
}

static int peer_aborts(int rank, int nranks, ncclUniqueId id)
{
    return peer_leaves(rank, nranks, id, 0);
}
static int peer_exits(int rank, int nranks, ncclUniqueId id)
{
    return peer_leaves(rank, nranks, id, 1);
}

/* Every rank waits on a receive from itself that it never sends (so the
 * others' aborts do not touch it), then aborts: promptly, and the stream
 * reports the failed receive. */
static int abort_with_pending_ops(int rank, int nranks, ncclUniqueId id)
{
    rank_ctx c;
    if (open_ctx(&c, rank, nranks, id)) return 1;
    unsigned char buf[4096];
    EXPECT(ncclRecv(buf, sizeof buf, ncclUint8, rank, c.comm, c.stream) == 0, "recv");
    EXPECT(cudaEventRecord(c.event, c.stream) == cudaSuccess, "record");
    sleep_s(0.3);
    EXPECT(cudaEventQuery(c.event) == cudaErrorNotReady, "the receive still pending");
    double t0 = seconds();
    EXPECT(ncclCommAbort(c.comm) == ncclSuccess, "abort");
    EXPECT(seconds() - t0 < 1, "abort took %.2f s", seconds() - t0);
    cudaError_t e = wait_event(c.event, 2);
    EXPECT(e == cudaErrorLaunchFailure, "the event failed, not %s", cudaGetErrorString(e));
    EXPECT(cudaStreamSynchronize(c.stream) == cudaErrorLaunchFailure, "the stream failed");
    cudaEventDestroy(c.event);
    cudaStreamDestroy(c.stream);
    return 0;
}

/* Even ranks send 100 bytes, odd ranks expect 200: both ends fail. */
static int p2p_size_mismatch(int rank, int nranks, ncclUniqueId id)
{
    rank_ctx c;
    if (open_ctx(&c, rank, nranks, id)) return 1;
    unsigned char buf[200] = {0};
    ncclResult_t r = rank % 2 == 0 ? ncclSend(buf, 100, ncclUint8, rank + 1, c.comm, c.stream)
                                   : ncclRecv(buf, 200, ncclUint8, rank - 1, c.comm, c.stream);
    EXPECT(r == ncclSuccess, "issue");
    if (fails(&c, 5, ncclInvalidUsage, ncclRemoteError)) return 1;
    close_ctx(&c, 1);
    return 0;
}

/* Rank 0 reduces 10 elements, the others 11: every rank fails. */
static int collective_mismatch(int rank, int nranks, ncclUniqueId id)
{
    rank_ctx c;
    if (open_ctx(&c, rank, nranks, id)) return 1;
    float in[11] = {0}, out[11];
    EXPECT(ncclAllReduce(in, out, rank == 0 ? 10 : 11, ncclFloat32, ncclSum, c.comm, c.stream) == 0,
           "issue");
    if (fails(&c, 5, ncclInvalidUsage, ncclRemoteError)) return 1;
    close_ctx(&c, 1);
    return 0;
}

/* A group holding an invalid call fails at its end and launches nothing:
 * the valid send in it must not take the first match. */
static int invalid_call_in_group(int rank, int nranks, ncclUniqueId id)
{
    rank_ctx c;
    if (open_ctx(&c, rank, nranks, id)) return 1;
    int peer = 1 - rank;
    unsigned char *first = filled(50 + rank, 512), *second = filled(60 + rank, 512),
                  *got = calloc(1, 512);
    EXPECT(ncclGroupStart() == ncclSuccess, "group start");
    EXPECT(ncclSend(first, 512, ncclUint8, peer, c.comm, c.stream) == ncclSuccess, "valid send");
    EXPECT(ncclSend(first, 512, ncclUint8, 99, c.comm, c.stream) == ncclInvalidArgument, "peer 99");
    EXPECT(ncclAllReduce(first, got, 8, ncclFloat32, ncclProd, c.comm, c.stream) ==
               ncclInvalidArgument,
           "prod");
    EXPECT(ncclGroupEnd() == ncclInvalidArgument, "the group's end reports the error");
    EXPECT(ncclGroupStart() == ncclSuccess && ncclGroupStart() == ncclSuccess, "nested start");
    EXPECT(ncclSend(second, 512, ncclUint8, peer, c.comm, c.stream) == ncclSuccess, "send");
    EXPECT(ncclRecv(got, 512, ncclUint8, peer, c.comm, c.stream) == ncclSuccess, "recv");
    EXPECT(ncclGroupEnd() == ncclSuccess, "inner end");
    EXPECT(ncclGroupEnd() == ncclSuccess, "outer end");
    if (completes(&c, 20)) return 1;
    EXPECT(first_wrong(got, 512, 60 + peer) < 0, "the second send's bytes arrived");
    close_ctx(&c, 0);
    free(first), free(second), free(got);
    return 0;
}

/* Only rank 0 of 2 comes: its initialisation gives up after the timeout. */
static int init_without_peer(int rank, int nranks, ncclUniqueId id)
{
    if (rank != 0) return 0;
    ncclComm_t comm = NULL;
    double t0 = seconds();
    ncclResult_t r = ncclCommInitRank(&comm, nranks, id, rank);
    EXPECT(r == ncclSystemError, "ncclCommInitRank failed, not %s", ncclGetErrorString(r));
    EXPECT(seconds() - t0 < 5, "it gave up after the timeout, took %.2f s", seconds() - t0);
    return 0;
}

/* Of 3 ranks, rank 1 dies inside ncclCommInitRank and rank 2 never comes:
 * rank 0 gives up at once, not after the timeout. */
static int init_peer_dies(int rank, int nranks, ncclUniqueId id)
{
    if (rank == 2) return 0;
    ncclComm_t comm = NULL;
    if (rank == 1) {
        alarm(1); /* kills it while it waits for rank 2 */
        ncclCommInitRank(&comm, nranks, id, rank);
        return 1;
    }
    double t0 = seconds();
    ncclResult_t r = ncclCommInitRank(&comm, nranks, id, rank);
    EXPECT(r == ncclRemoteError, "ncclCommInitRank failed, not %s", ncclGetErrorString(r));
    EXPECT(seconds() - t0 < 5, "it gave up early, took %.2f s", seconds() - t0);
    return 0;
}

/* NCCL refuses two ranks of a communicator on one device. */
static int same_device(int rank, int nranks, ncclUniqueId id)
{
    EXPECT(cudaSetDevice(0) == cudaSuccess, "set device");
    ncclComm_t comm = NULL;
    ncclResult_t r = ncclCommInitRank(&comm, nranks, id, rank);
    EXPECT(r == ncclInvalidUsage, "refused, not %s", ncclGetErrorString(r));
    return 0;
}

/* The CUDA calls around NCCL, in a rank of its own (BK_EMU_GPUS_PER_NODE=3):
 * the test's process itself never uses the runtime, as it forks the ranks. */
static int cuda_calls(int rank, int nranks, ncclUniqueId id)
{
    (void)rank, (void)nranks, (void)id;
    setenv("BK_EMU_GPUS_PER_NODE", "3", 1);
    char a[16], b[16], tiny[4];
    EXPECT(cudaDeviceGetPCIBusId(a, sizeof a, 0) == cudaSuccess, "bus id 0");
    EXPECT(cudaDeviceGetPCIBusId(b, sizeof b, 2) == cudaSuccess, "bus id 2");
    EXPECT(strcmp(a, b) != 0, "distinct ids, not %s twice", a);
    EXPECT(cudaDeviceGetPCIBusId(b, sizeof b, 3) == cudaErrorInvalidDevice, "no device 3");
    EXPECT(cudaDeviceGetPCIBusId(tiny, sizeof tiny, 0) == cudaErrorInvalidValue, "too small");
    EXPECT(cudaSetDevice(3) == cudaErrorInvalidDevice, "no device 3");
    EXPECT(cudaSetDevice(2) == cudaSuccess, "device 2");
    int dev = -1;
    EXPECT(cudaGetDevice(&dev) == cudaSuccess && dev == 2, "device %d", dev);

    cudaStream_t s;
    cudaEvent_t ev;
    EXPECT(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess, "stream");
    EXPECT(cudaStreamCreateWithFlags(&s, 42) == cudaErrorInvalidValue, "bad stream flags");
    EXPECT(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming) == cudaSuccess, "event");
    EXPECT(cudaEventQuery(ev) == cudaSuccess, "a never recorded event is complete");
    EXPECT(cudaEventRecord(ev, s) == cudaSuccess, "record");
    EXPECT(wait_event(ev, 5) == cudaSuccess, "the event completes");
    EXPECT(cudaStreamSynchronize(s) == cudaSuccess, "synchronize");
    EXPECT(cudaEventDestroy(ev) == cudaSuccess, "event destroy");
    EXPECT(cudaStreamDestroy(s) == cudaSuccess, "stream destroy");
    EXPECT(strcmp(cudaGetErrorString(cudaErrorNotReady), "device not ready") == 0, "error string");
    EXPECT(ncclGroupEnd() == ncclInvalidUsage, "group end without start");
    ncclResult_t async;
    EXPECT(ncclCommGetAsyncError(NULL, &async) == ncclInvalidArgument, "NULL communicator");

    /* a child forked after the runtime was used cannot use it */
    pid_t child = fork();
    if (child == 0) _exit(cudaSetDevice(0) == cudaErrorInitializationError ? 0 : 1);
    int st = -1;
    EXPECT(child > 0 && waitpid(child, &st, 0) == child, "fork");
    EXPECT(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the forked child was refused the runtime");
    return 0;
}

/* ------------------------------------------------------------------ the parent */

typedef struct {
    int nranks;
    int status[MAX_RANKS]; /* waitpid's, -1 when the rank was killed for hanging */
    char *err[MAX_RANKS];  /* its stderr */
    char shm_path[2][128]; /* its segments' names under /dev/shm (id, second_id) */
} run_result;

/* The segment's name that the id holds after its 16-byte tag (IdLayout in
 * emu/nccl/nccl_emu_internal.h). */
static void shm_path_of(const ncclUniqueId *id, char *path, size_t len)
{
    snprintf(path, len, "/dev/shm%.64s", id->internal + 16);
}

static char *read_all(int fd)
{
    off_t size = lseek(fd, 0, SEEK_END);
    char *text = calloc(1, (size_t)size + 1);
    if (size > 0 && pread(fd, text, (size_t)size, 0) != size) text[0] = 0;
    close(fd);
    return text;
}

static void run_rank(int rank, int nranks, ncclUniqueId id, const char *timeout, scenario fn,
                     int err_fd)
{
    dup2(err_fd, STDERR_FILENO);
    /* check's handlers, inherited, would kill the whole process group */
    signal(SIGALRM, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    signal(SIGINT, SIG_DFL);
    alarm(40); /* the last resort against a hang: the signal ends this rank alone */
    char n[16];
    snprintf(n, sizeof n, "%d", nranks);
    setenv("BK_EMU_GPUS_PER_NODE", n, 1);
    setenv("BK_EMU_NCCL_TIMEOUT", timeout, 1);
    int st = cudaSetDevice(rank) == cudaSuccess ? fn(rank, nranks, id) : 1;
    _exit(st);
}

/* Waits for every rank until limit_s, then kills the rest. */
static void reap(run_result *res, const pid_t *pids, double limit_s)
{
    double end = seconds() + limit_s;
    int left = res->nranks;
    for (int r = 0; r < res->nranks; r++) res->status[r] = -1;
    while (left > 0 && seconds() < end) {
        for (int r = 0; r < res->nranks; r++) {
            int st;
            if (res->status[r] == -1 && waitpid(pids[r], &st, WNOHANG) == pids[r])
                res->status[r] = st, left--;
        }
        sleep_s(0.005);
    }
    for (int r = 0; r < res->nranks; r++)
        if (res->status[r] == -1) {
            kill(pids[r], SIGKILL);
            waitpid(pids[r], NULL, 0);
        }
}

/* Runs fn as ranks 0..nranks-1, each its own process. */
static run_result run_ranks(int nranks, const char *timeout, scenario fn)
{
    run_result res;
    memset(&res, 0, sizeof res);
    res.nranks = nranks;
    ncclUniqueId id;
    ck_assert_int_eq(ncclGetUniqueId(&id), ncclSuccess);
    ck_assert_int_eq(ncclGetUniqueId(&second_id), ncclSuccess);
    shm_path_of(&id, res.shm_path[0], sizeof res.shm_path[0]);
    shm_path_of(&second_id, res.shm_path[1], sizeof res.shm_path[1]);
    pid_t pids[MAX_RANKS] = {0};
    int err_fds[MAX_RANKS] = {0};
    for (int r = 0; r < nranks; r++) {
        char path[] = "/tmp/nccl-emu-test-XXXXXX";
        err_fds[r] = mkstemp(path);
        ck_assert_int_ge(err_fds[r], 0);
        unlink(path);
        fflush(NULL);
        pids[r] = fork();
        ck_assert_int_ge(pids[r], 0);
        if (pids[r] == 0) run_rank(r, nranks, id, timeout, fn, err_fds[r]);
    }
    reap(&res, pids, 45);
    for (int r = 0; r < nranks; r++) res.err[r] = read_all(err_fds[r]);
    return res;
}

static void run_free(run_result *res)
{
    for (int r = 0; r < res->nranks; r++) free(res->err[r]);
}

/* Every rank exited 0 in time; nothing is left in /dev/shm. */
static void assert_all_passed(const run_result *res)
{
    for (int r = 0; r < res->nranks; r++) {
        ck_assert_msg(res->status[r] != -1, "rank %d of %d hung; its stderr:\n%s", r, res->nranks,
                      res->err[r]);
        ck_assert_msg(WIFEXITED(res->status[r]) && WEXITSTATUS(res->status[r]) == 0,
                      "rank %d of %d failed (status 0x%x); its stderr:\n%s", r, res->nranks,
                      res->status[r], res->err[r]);
    }
    for (int k = 0; k < 2; k++)
        ck_assert_msg(access(res->shm_path[k], F_OK) != 0, "%s was left behind", res->shm_path[k]);
}

static void assert_every_stderr_has(const run_result *res, const char *what)
{
    for (int r = 0; r < res->nranks; r++)
        ck_assert_msg(strstr(res->err[r], what), "rank %d's stderr lacks '%s':\n%s", r, what,
                      res->err[r]);
}

static void expect_pass(int nranks, const char *timeout, scenario fn)
{
    run_result res = run_ranks(nranks, timeout, fn);
    assert_all_passed(&res);
    run_free(&res);
}

/* ------------------------------------------------------------------ tests */

START_TEST(grouped_ring_step_moves_the_data)
{
    expect_pass(NRANKS, "20", ring_grouped);
}
END_TEST

START_TEST(a_rank_alone_sends_to_itself_in_a_group)
{
    expect_pass(1, "20", self_exchange);
}
END_TEST

/* Each rank's single report names its stalled receive and the send queued
 * behind it. */
static void expect_deadlock_reported(int nranks, scenario fn)
{
    run_result res = run_ranks(nranks, "2", fn);
    assert_all_passed(&res);
    int timed_out = 0;
    for (int r = 0; r < nranks; r++) {
        char prefix[32];
        snprintf(prefix, sizeof prefix, "nccl-emu: rank %d: ", r);
        const char *report = strstr(res.err[r], prefix);
        ck_assert_msg(report && !strstr(report + 1, prefix), "rank %d: one report:\n%s", r,
                      res.err[r]);
        timed_out += strstr(report, "no progress for 2 s; pending: ") != NULL;
    }
    ck_assert_msg(timed_out > 0, "some rank reports the timeout:\n%s", res.err[0]);
    assert_every_stderr_has(&res, "pending: ");
    assert_every_stderr_has(&res, "recv 1048579 bytes from rank");
    assert_every_stderr_has(&res, "send 1048579 bytes to rank");
    run_free(&res);
}

START_TEST(ungrouped_ring_receiving_first_deadlocks_and_is_reported)
{
    expect_deadlock_reported(NRANKS, ring_recv_first);
}
END_TEST

START_TEST(ungrouped_ring_sending_first_deadlocks_and_is_reported)
{
    expect_deadlock_reported(NRANKS, ring_send_first);
}
END_TEST

START_TEST(collectives_on_odd_sizes)
{
    expect_pass(NRANKS, "20", collectives);
}
END_TEST

START_TEST(point_to_point_matches_in_issue_order)
{
    expect_pass(NRANKS, "20", p2p_issue_order);
}
END_TEST

START_TEST(one_order_over_two_communicators_completes)
{
    expect_pass(NRANKS, "20", orders_agree);
}
END_TEST

/* The receiving ranks name the order; the model's timeout (20 s) is never
 * reached: the check fails them at the match. */
START_TEST(point_to_point_in_another_order_across_communicators_fails)
{
    run_result res = run_ranks(NRANKS, "20", p2p_orders_differ);
    assert_all_passed(&res);
    for (int r = 1; r < NRANKS; r += 2)
        ck_assert_msg(strstr(res.err[r], "in different orders before it"), "rank %d:\n%s", r,
                      res.err[r]);
    for (int r = 0; r < NRANKS; r++)
        ck_assert_msg(!strstr(res.err[r], "no progress"), "rank %d timed out:\n%s", r, res.err[r]);
    run_free(&res);
}
END_TEST

START_TEST(collectives_in_another_order_across_communicators_fail)
{
    run_result res = run_ranks(NRANKS, "20", collective_orders_differ);
    assert_all_passed(&res);
    ck_assert_msg(strstr(res.err[0], "in different orders before it"), "%s", res.err[0]);
    run_free(&res);
}
END_TEST

START_TEST(peer_that_aborts_fails_the_waiting_receive)
{
    run_result res = run_ranks(NRANKS, "30", peer_aborts);
    assert_all_passed(&res);
    ck_assert_msg(strstr(res.err[1], "rank 0 aborted the communicator"), "%s", res.err[1]);
    run_free(&res);
}
END_TEST

START_TEST(peer_that_exits_fails_the_waiting_receive)
{
    run_result res = run_ranks(NRANKS, "30", peer_exits);
    assert_all_passed(&res);
    ck_assert_msg(strstr(res.err[1], "rank 0 (pid"), "%s", res.err[1]);
    run_free(&res);
}
END_TEST

START_TEST(abort_returns_promptly_with_operations_pending)
{
    expect_pass(NRANKS, "30", abort_with_pending_ops);
}
END_TEST

START_TEST(mismatched_sizes_fail_both_ends)
{
    run_result res = run_ranks(NRANKS, "20", p2p_size_mismatch);
    assert_all_passed(&res);
    assert_every_stderr_has(&res, "matched a");
    run_free(&res);
}
END_TEST

START_TEST(mismatched_collectives_fail_every_rank)
{
    run_result res = run_ranks(NRANKS, "20", collective_mismatch);
    assert_all_passed(&res);
    ck_assert_msg(strstr(res.err[0], "ranks disagree on a collective"), "%s", res.err[0]);
    run_free(&res);
}
END_TEST

START_TEST(invalid_call_voids_its_group)
{
    expect_pass(2, "20", invalid_call_in_group);
}
END_TEST

START_TEST(initialisation_gives_up_without_its_peers)
{
    run_result res = run_ranks(2, "1", init_without_peer);
    assert_all_passed(&res);
    ck_assert_msg(strstr(res.err[0], "1 of 2 ranks joined"), "%s", res.err[0]);
    run_free(&res);
}
END_TEST

START_TEST(initialisation_gives_up_when_a_peer_dies)
{
    run_result res = run_ranks(3, "20", init_peer_dies);
    ck_assert_msg(WIFSIGNALED(res.status[1]) && WTERMSIG(res.status[1]) == SIGALRM,
                  "rank 1 died of its alarm (status 0x%x):\n%s", res.status[1], res.err[1]);
    res.status[1] = 0;
    assert_all_passed(&res);
    ck_assert_msg(strstr(res.err[0], "rank 1 (pid"), "%s", res.err[0]);
    run_free(&res);
}
END_TEST

START_TEST(two_ranks_on_one_device_are_refused)
{
    run_result res = run_ranks(2, "20", same_device);
    assert_all_passed(&res);
    assert_every_stderr_has(&res, "both use device 0");
    run_free(&res);
}
END_TEST

START_TEST(cuda_calls_around_nccl)
{
    expect_pass(1, "20", cuda_calls);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("nccl_emu");
    TCase *ok = check_tcase(s, "correctness", 120);
    check_add_loop_tests(ok, 1, 3, grouped_ring_step_moves_the_data, collectives_on_odd_sizes,
                         point_to_point_matches_in_issue_order,
                         one_order_over_two_communicators_completes);
    check_add_tests(ok, a_rank_alone_sends_to_itself_in_a_group, invalid_call_voids_its_group,
                    cuda_calls_around_nccl);
    TCase *fail = check_tcase(s, "failures", 120);
    check_add_loop_tests(fail, 1, 3, ungrouped_ring_receiving_first_deadlocks_and_is_reported,
                         ungrouped_ring_sending_first_deadlocks_and_is_reported,
                         peer_that_aborts_fails_the_waiting_receive,
                         peer_that_exits_fails_the_waiting_receive,
                         abort_returns_promptly_with_operations_pending,
                         mismatched_sizes_fail_both_ends, mismatched_collectives_fail_every_rank,
                         point_to_point_in_another_order_across_communicators_fails,
                         collectives_in_another_order_across_communicators_fail);
    check_add_tests(fail, initialisation_gives_up_without_its_peers,
                    initialisation_gives_up_when_a_peer_dies, two_ranks_on_one_device_are_refused);
    return check_run(s);
}
