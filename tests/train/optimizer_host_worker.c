/* optimizer_host_worker.c: one rank of the optimizer with its state on the
 * host ([memory] optimizer = host) on the emulated device, launched by
 * test_optimizer through `burst run -n P` with the emulator's streams
 * deferred (BK_EMU_STREAMS=deferred: a queued copy runs as late as the
 * program allows, so a read of it before its wait reads stale bytes).
 *
 * For stages 2 and 3 with bf16 parameters, two optimizers take the same
 * gradients, range by range, over three steps: one with its state on the
 * host and a device queue, one wholly on the host. The device one is given
 * each range in one device bucket which the next range overwrites at once,
 * queued, and zero_add_arrived is called right after zero_add_range, with
 * nothing between them waiting for the device: the part that came down
 * must be the range's sum all the same. After each step, on every rank:
 *   - the norms are the same bits;
 *   - stage 2: the device's bf16 parameters are the host optimizer's, bit
 *     for bit;
 *   - stage 3: every range gathered on the device (from the rounded masters
 *     the update made) is the host optimizer's gather of it, bit for bit,
 *     and after the masters are written through zero_masters (as a
 *     checkpoint's load writes them) the gathers follow the new values.
 * Prints "ok host state on P ranks" on rank 0. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/device.h"
#include "src/attn/device_link.h"
#include "src/train/zero.h"
#include "tests/lib/worker_device.h"
#include "util/rng.h"

enum { N_PARAMS = 1001, N_RANGES = 4, STEPS = 3 };

/* The ranges of the flat index, in the order a backward hands them over. */
static const int64_t range_edges[N_RANGES + 1] = {N_PARAMS, 700, 333, 101, 0};

/* The gradient of element i on rank r at step s: a float of either sign. */
static float grad_of(int64_t i, int r, int s)
{
    uint64_t h = bu_splitmix64(((uint64_t)i << 20) ^ ((uint64_t)r << 8) ^ (uint64_t)s);
    return (float)((double)(h >> 11) * 0x1.0p-53 - 0.5) * (float)(s + 1);
}

static void check(int ok, const char *what, int stage, int step)
{
    if (ok) return;
    fprintf(stderr, "rank %d, stage %d, step %d: %s\n", rank, stage, step, what);
    failures++;
}

/* Every range of this step's gradients into both optimizers: the host's
 * from host memory, the device's through one bucket the next range
 * overwrites, queued, right after zero_add_range returns. */
static void add_ranges(zero *on_host, zero *dev, const bk_queue *dq, float *bucket, int step)
{
    float *g = NULL; /* page-locked, as a queued copy's host side must be */
    if (bk_host_pinned_malloc(N_PARAMS * sizeof *g, (void **)&g) != BK_OK)
        worker_exit(BT_ERR_SYS, "page-locked memory");
    float *h = malloc(N_PARAMS * sizeof *h); /* the host's, summed in place */
    for (int64_t i = 0; i < N_PARAMS; i++) g[i] = h[i] = grad_of(i, rank, step);
    for (int k = 0; k < N_RANGES; k++) {
        int64_t b = range_edges[k + 1], e = range_edges[k];
        must(zero_add_range(on_host, h + b, b, e), "the host's range");
        must(bk_device_upload_async(dq, bucket, g + b, (size_t)(e - b) * sizeof(float)) == BK_OK
                 ? BT_OK
                 : BT_ERR_SYS,
             "the bucket's upload");
        must(zero_add_range(dev, bucket, b, e), "the device's range");
        /* the bucket written again before anything waits for the queue */
        must(bk_fill(dq, e - b, bucket, 1e30f) == BK_OK ? BT_OK : BT_ERR_SYS, "the bucket's fill");
        must(zero_add_arrived(dev), "the part that came down");
    }
    must(bk_device_sync(dq) == BK_OK ? BT_OK : BT_ERR_SYS, "the last fill");
    bk_host_pinned_free(g);
    free(h);
}

/* Stage 3: every range gathered by both, compared bit for bit. */
static void compare_gathers(zero *on_host, zero *dev, void *window, int stage, int step)
{
    size_t bytes = zero_window_bytes(N_PARAMS, BK_BF16);
    uint16_t *want = calloc(1, bytes), *got = calloc(1, bytes);
    for (int k = 0; k < N_RANGES; k++) {
        int64_t b = range_edges[k + 1], e = range_edges[k];
        must(zero_gather_range(on_host, want, b, e), "the host's gather");
        must(zero_gather_range(dev, window, b, e), "the device's gather");
        worker_device_read(got, window, zero_window_bytes(e - b, BK_BF16));
        check(memcmp(want, got, (size_t)(e - b) * 2) == 0, "a gathered range differs", stage, step);
    }
    free(want);
    free(got);
}

static void compare_params(uint16_t *host16, const uint16_t *dev16, int stage, int step)
{
    uint16_t *got = malloc(N_PARAMS * 2);
    worker_device_read(got, dev16, N_PARAMS * 2);
    check(memcmp(host16, got, N_PARAMS * 2) == 0, "the bf16 parameters differ", stage, step);
    free(got);
}

static void run_stage(int stage)
{
    bt_comm *comm = bt_world_comm(world);
    zero_hparams hp = {0.9, 0.95, 1e-8, 0.1, 1.0};
    bk_queue dq = {BK_DEVICE, NULL, 0, NULL};
    zero_sharding on_dev = {stage, 1, N_PARAMS}, plain = {stage, 0, 0};
    zero *on_host = zero_create(comm, N_PARAMS, NULL, &hp, NULL, BK_BF16, plain);
    zero *dev = zero_create(comm, N_PARAMS, NULL, &hp, &dq, BK_BF16, on_dev);
    if (!on_host || !dev) worker_exit(BT_ERR_SYS, "creating the optimizers");
    float *full = malloc(N_PARAMS * sizeof *full);
    for (int64_t i = 0; i < N_PARAMS; i++) full[i] = grad_of(i, 99, 0);
    size_t window_bytes = zero_window_bytes(N_PARAMS, BK_BF16); /* whole words */
    uint16_t *host16 = calloc(1, window_bytes), *dev16 = NULL;
    if (stage == 2) dev16 = worker_device_copy(host16, N_PARAMS * 2);
    float *bucket = worker_device_copy(full, N_PARAMS * sizeof(float));
    void *window = worker_device_copy(host16, window_bytes);
    check(zero_set_params(on_host, full, stage == 2 ? host16 : NULL) == 0 &&
              zero_set_params(dev, full, dev16) == 0,
          "setting the parameters", stage, 0);
    for (int step = 1; step <= STEPS; step++) {
        must(zero_clear_gradients(on_host), "clearing the host's");
        must(zero_clear_gradients(dev), "clearing the device's");
        add_ranges(on_host, dev, &dq, bucket, step);
        double norm_host = 0, norm_dev = 0;
        must(zero_step(on_host, stage == 2 ? host16 : NULL, NULL, 1e-2, step, &norm_host),
             "the host's step");
        must(zero_step(dev, dev16, NULL, 1e-2, step, &norm_dev), "the device's step");
        check(norm_host == norm_dev && isfinite(norm_dev), "the norms differ", stage, step);
        if (stage == 2) compare_params(host16, dev16, stage, step);
        if (stage == 3) compare_gathers(on_host, dev, window, stage, step);
    }
    if (stage == 3) { /* the masters written as a checkpoint's load writes them */
        int64_t b, e;
        zero_shard(dev, &b, &e);
        float *mh = zero_masters(on_host), *md = zero_masters(dev);
        for (int64_t i = 0; i < e - b; i++) mh[i] = md[i] = -full[b + i];
        compare_gathers(on_host, dev, window, stage, STEPS + 1);
    }
    bk_device_free(bucket);
    bk_device_free(window);
    bk_device_free(dev16);
    free(host16);
    free(full);
    zero_free(dev);
    zero_free(on_host);
}

int main(void)
{
    worker_init("optimizer_host_worker");
    if (!bk_device_available() || transport_link_device(world, -1) != BT_OK) {
        fprintf(stderr, "optimizer_host_worker: no device, or the transport refused it\n");
        return WORKER_USAGE;
    }
    run_stage(2);
    run_stage(3);
    int64_t total = worker_finish();
    if (rank == 0 && total == 0) printf("ok host state on %d ranks\n", size);
    return total == 0 ? 0 : 1;
}
