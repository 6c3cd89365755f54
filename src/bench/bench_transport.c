/* bench_transport.c: `burst bench transport`. Measures, in one run, the
 * transport's point-to-point bandwidth and latency, ring bandwidth and
 * all-reduce bus bandwidth under `burst run`, and `ucx_perftest` (tag_bw,
 * tag_lat) for the same message sizes on the same machine, and prints the
 * ratios. The command re-launches itself as the ranks (--worker); rank 0
 * prints one machine-readable line per measurement, which the parent reads. */
#define _GNU_SOURCE
#include "config.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/device.h"
#include "src/attn/device_link.h"
#include "src/bench/bench.h"
#include "src/bench/relaunch.h"
#include "src/plan/profile.h"
#include "transport/launch.h"
#include "transport/transport.h"
#include "util/clock.h"
#include "util/exit_codes.h"
#include "util/options.h"

static const size_t default_sizes[] = {4096, 65536, 1 << 20, 16 << 20, 64 << 20};
#define N_SIZES (sizeof default_sizes / sizeof default_sizes[0])
#define MiB (1024.0 * 1024.0)

/* What the command line sets. */
typedef struct {
    int quick, device;
    int is_worker; /* one of the ranks the command started (--worker) */
    /* the ring and all-reduce runs; slot 7 is the point-to-point run when the
     * list has no 2 */
    int rank_counts[8], n_counts;
    const char *profile_out; /* --profile-out: the intra link row written there */
} transport_opts;

static int set_ranks(void *o, const char *v)
{
    transport_opts *t = o;
    return bench_parse_rank_counts(v, t->rank_counts, &t->n_counts, 7);
}

#define OPT(field) offsetof(transport_opts, field)
static const bu_option options[] = {
    {"--ranks", "LIST", BU_OPT_CUSTOM, 0, 0, 0, set_ranks,
     "comma-separated rank counts for ring and all-reduce, each\n"
     "2..64, at most 7 (default 2,4)"},
    {"--quick", NULL, BU_OPT_FLAG, OPT(quick), 0, 0, NULL,
     "fewer iterations and sizes up to 1 MiB (a few seconds)"},
    {"--device", NULL, BU_OPT_FLAG, OPT(device), 0, 0, NULL,
     "the same on device buffers too, each rank on its device (CUDA, or\n"
     "the emulator in tests/train/burst_emu), through the transport's\n"
     "device path (staged: device-to-host copy, wire, host-to-device\n"
     "copy, pipelined; or NCCL), and the device all-reduce; ratios to\n"
     "the host buffers of the same run"},
    {"--profile-out", "FILE", BU_OPT_STRING, OPT(profile_out), 0, 0, NULL,
     "write the point-to-point figures as a device profile's link\n"
     "row for `burst plan time`: path intra, the largest message's\n"
     "bandwidth and the smallest's latency, on host buffers"},
    {"--worker", NULL, BU_OPT_FLAG, OPT(is_worker), 0, 0, NULL,
     "run as one of the ranks (how the benchmark starts itself\n"
     "under `burst run`; not for people)"},
};
#undef OPT
enum { N_OPTIONS = sizeof options / sizeof options[0] };

static void usage(FILE *out)
{
    fprintf(out, "usage: burst bench transport [--ranks LIST] [--quick] [--device]\n\n"
                 "Point-to-point bandwidth (window of 8 messages, 2 ranks), ring bandwidth (every\n"
                 "rank sends to the next while receiving from the previous), all-reduce bus\n"
                 "bandwidth (2(P-1)/P x bytes / time) and ping-pong latency, for messages of\n"
                 "4 KiB .. 64 MiB, under `burst run` on this machine; in the same run\n"
                 "`ucx_perftest -t tag_bw` and `-t tag_lat` for the same sizes, and the ratios.\n"
                 "Bandwidth in MiB/s (2^20 bytes per second), as ucx_perftest reports it.\n\n");
    bu_options_print(out, options, N_OPTIONS, 16);
}

static int iterations(size_t bytes, int quick)
{
    double target = quick ? 32 * MiB : 512 * MiB; /* bytes moved per measurement */
    int n = (int)(target / (double)bytes);
    if (n < 10) n = 10;
    if (n > (quick ? 200 : 2000)) n = quick ? 200 : 2000;
    return n;
}

/* ------------------------------------------------------------------ rank side */

static int must(bt_world *w, bt_status st)
{
    if (st == BT_OK) return 0;
    fprintf(stderr, "bench transport: %s\n", bt_world_error(w));
    exit(EXIT_RUN_FAILURE);
}

/* Where a measurement's buffers live, and the prefix of its result lines
 * ("" for host memory, "dev-" for device memory). */
typedef struct {
    bt_mem mem;
    const char *prefix;
} buffers;

static void p2p_bandwidth(bt_world *w, size_t bytes, int iters, unsigned char *buf, buffers on)
{
    bt_comm *c = bt_world_comm(w);
    int rank = bt_world_rank(w);
    enum { WINDOW = 8 };
    bt_request *reqs[WINDOW];
    must(w, bt_barrier(c));
    double t0 = bu_now();
    for (int done = 0; done < iters; done += WINDOW) {
        int n = iters - done < WINDOW ? iters - done : WINDOW;
        for (int k = 0; k < n; k++)
            must(w, rank == 0 ? bt_isend_mem(c, 1, 0, buf, bytes, on.mem, &reqs[k])
                              : bt_irecv_mem(c, 0, 0, buf, bytes, on.mem, &reqs[k]));
        must(w, bt_waitall(n, reqs));
    }
    /* The receiver's acknowledgement closes the measurement. */
    char ack = 0;
    bt_request *r;
    must(w, rank == 0 ? bt_irecv(c, 1, 1, &ack, 1, &r) : bt_isend(c, 0, 1, &ack, 1, &r));
    must(w, bt_wait(&r));
    double t = bu_now() - t0;
    if (rank == 0) printf("%sp2p %zu %.1f\n", on.prefix, bytes, (double)bytes * iters / t / MiB);
}

/* Ping-pong: as ucx_perftest -t tag_lat, 100 round trips of warm-up first,
 * then at least 20000 timed (what the parent gives ucx_perftest). */
static void latency(bt_world *w, size_t bytes, int iters, unsigned char *buf)
{
    bt_comm *c = bt_world_comm(w);
    int rank = bt_world_rank(w);
    bt_request *r;
    enum { WARMUP = 100 };
    if (iters < 20000) iters = 20000;
    must(w, bt_barrier(c));
    double t0 = bu_now();
    for (int i = -WARMUP; i < iters; i++) {
        if (i == 0) t0 = bu_now();
        if (rank == 0) {
            must(w, bt_isend(c, 1, 2, buf, bytes, &r));
            must(w, bt_wait(&r));
            must(w, bt_irecv(c, 1, 2, buf, bytes, &r));
            must(w, bt_wait(&r));
        } else {
            must(w, bt_irecv(c, 0, 2, buf, bytes, &r));
            must(w, bt_wait(&r));
            must(w, bt_isend(c, 0, 2, buf, bytes, &r));
            must(w, bt_wait(&r));
        }
    }
    double t = bu_now() - t0;
    if (rank == 0) printf("lat %zu %.3f\n", bytes, t / iters / 2 * 1e6);
}

static void ring_bandwidth(bt_world *w, size_t bytes, int iters, unsigned char *out,
                           unsigned char *in, buffers on)
{
    bt_comm *c = bt_world_comm(w);
    int rank = bt_world_rank(w), size = bt_world_size(w);
    must(w, bt_barrier(c));
    double t0 = bu_now();
    for (int i = 0; i < iters; i++) {
        bt_request *reqs[2];
        must(w, bt_irecv_mem(c, (rank - 1 + size) % size, 3, in, bytes, on.mem, &reqs[0]));
        must(w, bt_isend_mem(c, (rank + 1) % size, 3, out, bytes, on.mem, &reqs[1]));
        must(w, bt_waitall(2, reqs));
    }
    must(w, bt_barrier(c));
    double t = bu_now() - t0;
    if (rank == 0)
        printf("%sring %d %zu %.1f\n", on.prefix, size, bytes, (double)bytes * iters / t / MiB);
}

static void allreduce_bandwidth(bt_world *w, size_t bytes, int iters, float *buf, buffers on)
{
    bt_comm *c = bt_world_comm(w);
    int rank = bt_world_rank(w), size = bt_world_size(w);
    must(w, bt_barrier(c));
    double t0 = bu_now();
    for (int i = 0; i < iters; i++)
        must(w, bt_allreduce_mem(c, buf, bytes / 4, BT_F32, BT_SUM, on.mem));
    double t = bu_now() - t0;
    double bus = 2.0 * (size - 1) / size * (double)bytes * iters / t / MiB;
    if (rank == 0) printf("%sallreduce %d %zu %.1f\n", on.prefix, size, bytes, bus);
}

/* Every measurement of one size on buffers a and b (max bytes each). */
static void measure(bt_world *w, size_t bytes, int quick, unsigned char *a, unsigned char *b,
                    buffers on)
{
    int iters = iterations(bytes, quick);
    if (bt_world_size(w) == 2) {
        p2p_bandwidth(w, bytes, iters, a, on);
        if (bytes <= 65536 && on.mem == BT_MEM_HOST) latency(w, bytes, iters, a);
    }
    ring_bandwidth(w, bytes, iters, a, b, on);
    allreduce_bandwidth(w, bytes, iters / 4 + 2, (float *)a, on);
    fflush(stdout);
}

/* Device buffers a and b of bytes each on this rank's device, the world told
 * how to reach them (as the trainer does); rank 0 names the path to rank 1. */
static void device_buffers(bt_world *w, size_t bytes, void **a, void **b)
{
    int count = 0;
    if (!bk_device_available() || bk_device_use(bt_world_local_rank(w), &count) != BK_OK) {
        fprintf(stderr, "bench transport: --device: no device in this program (its backend: %s)\n",
                bk_device_backend_name());
        exit(EXIT_RUN_FAILURE);
    }
    must(w, transport_link_device(w, bt_world_local_rank(w) % count));
    if (bk_device_malloc(bytes, a) != BK_OK || bk_device_malloc(bytes, b) != BK_OK) {
        fprintf(stderr, "bench transport: --device: cannot allocate 2 x %zu bytes of device memory\n",
                bytes);
        exit(EXIT_RUN_FAILURE);
    }
    if (bt_world_rank(w) == 0)
        printf("dev-path %s %s\n", bk_device_backend_name(),
               bt_comm_device_path(bt_world_comm(w), 1 % bt_world_size(w)));
}

static int worker(int quick, int device)
{
    char err[512];
    bt_world *w;
    bt_status st = bt_world_init(NULL, &w, err, sizeof err);
    if (st != BT_OK) {
        fprintf(stderr, "bench transport: %s\n", err);
        return EXIT_RUN_FAILURE;
    }
    size_t max_bytes = quick ? (1 << 20) : default_sizes[N_SIZES - 1];
    unsigned char *a = calloc(1, max_bytes), *b = calloc(1, max_bytes);
    void *dev_a = NULL, *dev_b = NULL;
    if (device) device_buffers(w, max_bytes, &dev_a, &dev_b);
    for (size_t s = 0; s < N_SIZES && default_sizes[s] <= max_bytes; s++) {
        measure(w, default_sizes[s], quick, a, b, (buffers){BT_MEM_HOST, ""});
        if (device) measure(w, default_sizes[s], quick, dev_a, dev_b, (buffers){BT_MEM_DEVICE, "dev-"});
    }
    free(a);
    free(b);
    bk_device_free(dev_a);
    bk_device_free(dev_b);
    return bt_world_finalize(w) == BT_OK ? 0 : EXIT_RUN_FAILURE;
}

/* ------------------------------------------------------------------ parent side */

/* One run's figures on one kind of buffer. */
typedef struct {
    double p2p[N_SIZES];                        /* from the 2-rank run */
    double ring[8][N_SIZES], allreduce[8][N_SIZES];
} figures;

typedef struct {
    figures host, dev;        /* dev: device buffers, with --device */
    double lat[N_SIZES];      /* host, from the 2-rank run */
    double perf_bw[N_SIZES], perf_lat[N_SIZES]; /* ucx_perftest */
    char dev_path[64];        /* "emulator staged", "cuda nccl"... */
} results;

static int size_index(size_t bytes)
{
    for (size_t s = 0; s < N_SIZES; s++)
        if (default_sizes[s] == bytes) return (int)s;
    return -1;
}

/* Files one result line of a rank-0 body into res; 0 when it is not one. */
static int parse_result(const char *body, results *res, int slot)
{
    int size, dev = strncmp(body, "dev-", 4) == 0;
    size_t bytes;
    double v;
    char backend[32], path[32];
    figures *f = dev ? &res->dev : &res->host;
    const char *line = dev ? body + 4 : body;
    if (dev && sscanf(line, "path %31s %31s", backend, path) == 2) {
        snprintf(res->dev_path, sizeof res->dev_path, "%s, path %s", backend, path);
        return 1;
    }
    if (sscanf(line, "p2p %zu %lf", &bytes, &v) == 2 && size_index(bytes) >= 0)
        f->p2p[size_index(bytes)] = v;
    else if (!dev && sscanf(line, "lat %zu %lf", &bytes, &v) == 2 && size_index(bytes) >= 0)
        res->lat[size_index(bytes)] = v;
    else if (sscanf(line, "ring %d %zu %lf", &size, &bytes, &v) == 3 && size_index(bytes) >= 0)
        f->ring[slot][size_index(bytes)] = v;
    else if (sscanf(line, "allreduce %d %zu %lf", &size, &bytes, &v) == 3 && size_index(bytes) >= 0)
        f->allreduce[slot][size_index(bytes)] = v;
    else
        return 0;
    return 1;
}

static int run_ranks(const char *self, int ranks, int quick, int device, results *res, int slot)
{
    FILE *p = bench_relaunch(self, ranks, 0, 0, "bench transport --worker%s%s",
                             quick ? " --quick" : "", device ? " --device" : "");
    if (!p) return -1;
    char line[512];
    while (fgets(line, sizeof line, p))
        if (!parse_result(bench_rank_line(line), res, slot)) fputs(line, stderr);
    return pclose(p) == 0 ? 0 : -1;
}

/* A port that was free a moment ago (the launcher's listening socket, closed),
 * or 13337 when none could be had. */
static int free_port(void)
{
    char err[256];
    int port = 13337, fd = bt_launch_listen(&port, err, sizeof err);
    if (fd >= 0) close(fd);
    return port;
}

/* One ucx_perftest measurement: server in the background, client in front;
 * returns the "Final:" line's overall bandwidth (MiB/s) or latency (usec). */
static double ucx_perftest(const char *test, size_t bytes, int iters)
{
    char cmd[1024], line[1024];
    int port = free_port();
    snprintf(cmd, sizeof cmd,
             "ucx_perftest -t %s -s %zu -n %d -p %d >/dev/null 2>&1 & srv=$!; sleep 0.3; "
             "ucx_perftest 127.0.0.1 -t %s -s %zu -n %d -p %d 2>/dev/null; wait $srv",
             test, bytes, iters, port, test, bytes, iters, port);
    FILE *p = popen(cmd, "r");
    if (!p) return 0;
    double result = 0;
    while (fgets(line, sizeof line, p)) {
        double it, p50, avg, overall, bw_avg, bw_overall;
        if (sscanf(line, "Final: %lf %lf %lf %lf %lf %lf", &it, &p50, &avg, &overall, &bw_avg,
                   &bw_overall) == 6)
            result = strcmp(test, "tag_lat") == 0 ? avg : bw_overall;
    }
    pclose(p);
    return result;
}

static void ratio_cell(char *out, size_t len, double ours, double ref)
{
    if (ours > 0 && ref > 0)
        snprintf(out, len, "%.2f", ours / ref);
    else
        snprintf(out, len, "n/a");
}

static void print_host_tables(const results *res, const int *rank_counts, int n_counts,
                              size_t max_bytes)
{
    printf("point-to-point, 2 ranks (MiB/s; latency in usec, half round trip)\n");
    printf("%10s %12s %12s %7s %10s %10s %7s\n", "bytes", "burst", "ucx_perftest", "ratio",
           "lat burst", "lat ucx", "ratio");
    for (size_t s = 0; s < N_SIZES && default_sizes[s] <= max_bytes; s++) {
        char r1[16], r2[16];
        ratio_cell(r1, sizeof r1, res->host.p2p[s], res->perf_bw[s]);
        ratio_cell(r2, sizeof r2, res->perf_lat[s], res->lat[s]); /* lower is better */
        printf("%10zu %12.1f %12.1f %7s", default_sizes[s], res->host.p2p[s], res->perf_bw[s], r1);
        if (default_sizes[s] <= 65536)
            printf(" %10.2f %10.2f %7s\n", res->lat[s], res->perf_lat[s], r2);
        else
            printf("\n");
    }
    for (int k = 0; k < n_counts; k++) {
        printf("\n%d ranks: ring bandwidth per rank and all-reduce bus bandwidth (MiB/s)\n",
               rank_counts[k]);
        printf("%10s %12s %12s %12s\n", "bytes", "ring", "vs perftest", "allreduce");
        for (size_t s = 0; s < N_SIZES && default_sizes[s] <= max_bytes; s++) {
            char r1[16];
            ratio_cell(r1, sizeof r1, res->host.ring[k][s], res->perf_bw[s]);
            printf("%10zu %12.1f %12s %12.1f\n", default_sizes[s], res->host.ring[k][s], r1,
                   res->host.allreduce[k][s]);
        }
    }
}

/* Device buffers against host buffers of the same run: what the device path
 * (on a staged path: device-to-host copy, wire, host-to-device copy) costs. */
static void print_device_tables(const results *res, const int *rank_counts, int n_counts,
                                size_t max_bytes)
{
    printf("\ndevice buffers (%s): bandwidth in MiB/s, ratio to host buffers in this run\n",
           res->dev_path[0] ? res->dev_path : "path unknown");
    printf("%10s %12s %7s\n", "bytes", "p2p", "vs host");
    for (size_t s = 0; s < N_SIZES && default_sizes[s] <= max_bytes; s++) {
        char r[16];
        ratio_cell(r, sizeof r, res->dev.p2p[s], res->host.p2p[s]);
        printf("%10zu %12.1f %7s\n", default_sizes[s], res->dev.p2p[s], r);
    }
    for (int k = 0; k < n_counts; k++) {
        printf("\n%d ranks, device buffers: ring per rank and all-reduce bus bandwidth (MiB/s)\n",
               rank_counts[k]);
        printf("%10s %12s %7s %12s %7s\n", "bytes", "ring", "vs host", "allreduce", "vs host");
        for (size_t s = 0; s < N_SIZES && default_sizes[s] <= max_bytes; s++) {
            char r1[16], r2[16];
            ratio_cell(r1, sizeof r1, res->dev.ring[k][s], res->host.ring[k][s]);
            ratio_cell(r2, sizeof r2, res->dev.allreduce[k][s], res->host.allreduce[k][s]);
            printf("%10zu %12.1f %7s %12.1f %7s\n", default_sizes[s], res->dev.ring[k][s], r1,
                   res->dev.allreduce[k][s], r2);
        }
    }
}

/* --profile-out: the link between two ranks of this machine, as measured. */
static int write_profile(const char *path, const results *res, size_t max_bytes, int argc,
                         char **argv)
{
    char cmd[1024], err[512];
    profile_command_line(cmd, sizeof cmd, "burst bench", argc, argv);
    int last = 0;
    for (size_t s = 0; s < N_SIZES && default_sizes[s] <= max_bytes; s++) last = (int)s;
    profile_writer w;
    if (profile_writer_open(&w, path, "cpu-transport", "UCX between ranks of one machine", cmd, err,
                            sizeof err) != 0) {
        fprintf(stderr, "burst bench transport: %s\n", err);
        return -1;
    }
    profile_row r = {.kind = PROFILE_LINK,
                     .path = PROFILE_LINK_INTRA,
                     .gbps = res->host.p2p[last] * MiB / 1e9,
                     .latency_us = res->lat[0],
                     .per_node = 1};
    profile_write_row(&w, &r);
    int ok = r.gbps > 0 && r.latency_us > 0;
    if (profile_writer_close(&w, path, ok, err, sizeof err) != 0) {
        fprintf(stderr, "burst bench transport: %s\n", ok ? err : "no point-to-point figures");
        return -1;
    }
    printf("profile: %s (burst plan time --profile %s)\n", path, path);
    return 0;
}

int bench_transport(int argc, char **argv)
{
    transport_opts o = {.rank_counts = {2, 4}, .n_counts = 2};
    int parsed =
        bu_options_parse("burst bench transport", options, N_OPTIONS, argc, argv, &o, NULL);
    if (parsed == 1) usage(stdout);
    if (parsed != 0) return parsed == 1 ? 0 : EXIT_USAGE;
    int quick = o.quick, device = o.device, *rank_counts = o.rank_counts, n_counts = o.n_counts;
    if (o.is_worker) return worker(quick, device);

    char self[4096];
    if (bench_self_path("burst bench transport", self, sizeof self) != 0) return EXIT_RUN_FAILURE;
    results *res = calloc(1, sizeof *res);
    size_t max_bytes = quick ? (1 << 20) : default_sizes[N_SIZES - 1];
    /* Point-to-point numbers come from a 2-rank run; add one if the list lacks it. */
    int has_two = 0;
    for (int k = 0; k < n_counts; k++) has_two |= rank_counts[k] == 2;
    for (int k = has_two ? 0 : -1; k < n_counts; k++) {
        int ranks = k < 0 ? 2 : rank_counts[k];
        if (run_ranks(self, ranks, quick, device, res, k < 0 ? 7 : k) != 0) {
            fprintf(stderr, "burst bench transport: the %d-rank run failed\n", ranks);
            free(res);
            return EXIT_RUN_FAILURE;
        }
    }
    int have_perftest = system("command -v ucx_perftest >/dev/null 2>&1") == 0;
    for (size_t s = 0; have_perftest && s < N_SIZES && default_sizes[s] <= max_bytes; s++) {
        /* ucx_perftest's averages include its connection start-up: short runs of
         * small messages understate it by orders of magnitude, so give it ten
         * times the iterations, and at least 20000 for small messages. */
        int iters = 10 * iterations(default_sizes[s], quick);
        if (default_sizes[s] <= 65536 && iters < 20000) iters = 20000;
        res->perf_bw[s] = ucx_perftest("tag_bw", default_sizes[s], iters);
        if (default_sizes[s] <= 65536) res->perf_lat[s] = ucx_perftest("tag_lat", default_sizes[s], iters);
    }
    if (!have_perftest)
        printf("ucx_perftest not found (Debian package ucx-utils): ratios are n/a\n");

    print_host_tables(res, rank_counts, n_counts, max_bytes);
    if (device) print_device_tables(res, rank_counts, n_counts, max_bytes);
    printf("\nratio: burst / ucx_perftest bandwidth (for latency: ucx_perftest / burst), "
           "measured in this run.\n");
    int status = o.profile_out && write_profile(o.profile_out, res, max_bytes, argc, argv) != 0
                     ? EXIT_RUN_FAILURE
                     : 0;
    free(res);
    return status;
}
