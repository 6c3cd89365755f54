/* model_device_worker.c: one rank of the model runner on the device against
 * the same runner on the host, under `burst run` (tests/train/test_train).
 *
 * Both runners take the same parameters, tokens and labels; the device runner
 * keeps every buffer in device memory and its ring moves device buffers (on
 * the emulated device in make check). One forward + backward of two
 * micro-batches on each must give the same loss sum and valid count, and the
 * same gradients of every tensor. Tolerance: the device's attention rounds
 * Q, K, V (and P, dS) to bf16 for its tensor cores, about 2^-8 relative,
 * where the host computes in fp32; the worst error of each tensor relative to
 * its largest gradient is printed. --matmul bf16 gives the device runner bf16
 * parameters (the host's rounded) and bf16 operands in the layers' matrix
 * products (the same rounding, in more places; the same tolerance); that
 * runner must refuse fp32 parameters. The device runs its MLP in chunks of 9
 * tokens, the host in one. Then both predict the next token at every row.
 *
 * Prints "ok model on the device" on rank 0, exits 1 on a mismatch.
 * Usage: model_device_worker [--mask causal|document|sparse] [--fraction F]
 *                            [--double-ring NODES] [--matmul fp32|bf16] */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/device.h"
#include "src/attn/device_link.h"
#include "src/train/data/token_source.h"
#include "src/train/model.h"
#include "tests/lib/worker_device.h"
#include "tests/lib/worker_model.h"

enum { MICRO_BATCHES = 2 };

typedef struct {
    const char *mask;
    double fraction;
    int nodes; /* > 1: the double ring over that many emulated nodes */
    int bf16_matmul;
} options;

static void usage_exit(const char *why)
{
    fprintf(stderr, "model_device_worker: %s\n", why);
    exit(WORKER_USAGE);
}

static options parse_options(int argc, char **argv)
{
    options o = {"causal", 1.0, 1, 0};
    for (int i = 1; i < argc; i += 2) {
        if (i + 1 >= argc) usage_exit("an option without its value");
        if (strcmp(argv[i], "--mask") == 0)
            o.mask = argv[i + 1];
        else if (strcmp(argv[i], "--fraction") == 0)
            o.fraction = atof(argv[i + 1]);
        else if (strcmp(argv[i], "--double-ring") == 0)
            o.nodes = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--matmul") == 0)
            o.bf16_matmul = strcmp(argv[i + 1], "bf16") == 0;
        else
            usage_exit("unknown option (see the file's top comment)");
    }
    return o;
}

typedef struct {
    double loss;
    int64_t valid;
} step_sums;

/* Micro-batches 0 and 1 (the second with the labels shifted by one token) on
 * runner r, the gradients accumulated into grads. */
static step_sums forward_backward(model_runner *r, model_params params, float *grads,
                                  const int64_t *tokens, const int64_t *labels[MICRO_BATCHES])
{
    step_sums s = {0, 0};
    model_step_stats st = {0};
    for (int mb = 0; mb < MICRO_BATCHES; mb++)
        must(model_forward_backward(r, mb, params, &(model_grads){.whole = grads}, tokens,
                                    labels[mb], 0.01f, &s.loss, &s.valid, &st),
             "forward/backward");
    return s;
}

typedef struct {
    const char *name;
    int64_t offset, count;
} tensor_span;

/* The worst |device - host| of each parameter tensor, relative to the
 * tensor's largest host gradient. */
static void compare_gradients(const model_layout *m, const float *host, const float *dev)
{
    const model_dims *d = &m->dims;
    int64_t D = d->d_model, QD = (int64_t)d->n_heads * d->head_dim,
            KD = (int64_t)d->n_kv_heads * d->head_dim, F = d->d_ff;
    tensor_span t[12] = {{"embedding", m->embed, (int64_t)d->vocab * D},
                  {"final_norm", m->final_norm, D},
                  {"head", m->head, (int64_t)d->vocab * D}};
    int n = 3;
    const layer_offsets *o = &m->layer[d->layers - 1]; /* the last layer's tensors */
    t[n++] = (tensor_span){"attn_norm", o->attn_norm, D};
    t[n++] = (tensor_span){"wq", o->wq, D * QD};
    t[n++] = (tensor_span){"wk", o->wk, D * KD};
    t[n++] = (tensor_span){"wv", o->wv, D * KD};
    t[n++] = (tensor_span){"wo", o->wo, QD * D};
    t[n++] = (tensor_span){"w_gate_up", o->w_gate_up, D * 2 * F};
    t[n++] = (tensor_span){"w_down", o->w_down, F * D};
    for (int k = 0; k < n; k++) {
        double worst = 0, scale = 1e-30;
        for (int64_t i = t[k].offset; i < t[k].offset + t[k].count; i++) {
            double e = fabs((double)dev[i] - host[i]);
            if (!(e <= worst)) worst = e; /* NaN sticks */
            if (fabs(host[i]) > scale) scale = fabs(host[i]);
        }
        if (rank == 0) printf("gradient %-10s worst error / largest %.2e\n", t[k].name, worst / scale);
        if (!(worst <= 5e-2 * scale)) {
            fprintf(stderr, "rank %d: gradient of %s: device differs by %.3g, largest %.3g\n",
                    rank, t[k].name, worst, scale);
            failures++;
        }
    }
}

/* The next token the device predicts (model_predict) at each of this rank's
 * n rows against the host's: with fp32 products every one the same; with
 * bf16 parameters and products a near tie may go the other way, in at most
 * one row in eight (a wrong head would miss nearly every row of 256 tokens).
 * 1 on a mismatch. */
static int compare_predictions(model_runner *host, model_runner *dev, model_params hp,
                               model_params dp, const int64_t *tokens, const int64_t *d_tokens,
                               int64_t n)
{
    int64_t allowed = dp.bf16 ? n / 8 : 0;
    int64_t *rows = malloc((size_t)n * sizeof *rows), *want = malloc((size_t)n * sizeof *want),
            *got = malloc((size_t)n * sizeof *got);
    for (int64_t i = 0; i < n; i++) rows[i] = i;
    int failed = model_predict(host, hp, tokens, rows, (int)n, want) != BT_OK ||
                 model_predict(dev, dp, d_tokens, rows, (int)n, got) != BT_OK;
    int64_t off = 0;
    for (int64_t i = 0; i < n && !failed; i++) off += got[i] != want[i];
    if (rank == 0) printf("predictions: %lld of %lld rows differ\n", (long long)off, (long long)n);
    if (failed || off > allowed) {
        fprintf(stderr, "rank %d: %s\n", rank,
                failed ? "a prediction failed" : "the device predicts other tokens");
        failed = 1;
    }
    free(rows), free(want), free(got);
    return failed;
}

int main(int argc, char **argv)
{
    options o = parse_options(argc, argv);
    char err[512];
    worker_init("model_device_worker");
    if (!bk_device_available() || transport_link_device(world, -1) != BT_OK)
        usage_exit("no device, or the transport refused it");
    model_dims dims = test_worker_model_dims(2);
    model_layout m;
    if (model_layout_init(&m, &dims) != 0) usage_exit("out of memory");
    int64_t N = 32 * (int64_t)size;
    int kind = train_config_value("parallel", "mask", o.mask);
    if (kind < 0) usage_exit("--mask: causal, window, document or sparse");
    seq_layout layout;
    if (seq_layout_init(&layout, choose_layout(LAYOUT_CHOICE_AUTO, (train_mask_choice)kind), size,
                        N, err, sizeof err) != 0)
        usage_exit(err);
    /* sparse: blocks of 8 tokens, each seeing itself, the one before and the first */
    bk_attn_mask mask = choose_mask((train_mask_choice)kind, 0);
    uint64_t *bits = NULL;
    if ((mask.flags & BK_ATTN_BLOCK_SPARSE) &&
        choose_sparse_mask("local:2+global:1", 8, N, &mask, &bits, err, sizeof err) != 0)
        usage_exit(err);
    bk_queue hq = bk_host_queue(), dq = {BK_DEVICE, NULL, 0, NULL};
    model_runner_config rc = {
        .model = &m,
        .cp = bt_world_comm(world),
        .layout = layout,
        .topo = o.nodes > 1 ? TOPO_DOUBLE : TOPO_FLAT,
        .nodes = o.nodes,
        .mask = mask,
        .backward = BWD_AUTO,
        .keep = choose_keep(o.fraction),
        .micro_batches = MICRO_BATCHES,
        .fused_head = 1,
        .head = {.chunk_tokens = 7, .z_loss = 1e-3f, .ignore_index = TOKEN_IGNORE},
        .queue = &hq};
    model_runner *host = model_runner_create(&rc, err, sizeof err);
    rc.queue = &dq;
    rc.bf16_matmul = o.bf16_matmul;
    rc.chunk_rows = 9; /* the device's MLP in chunks, the last one short */
    model_runner *dev = host ? model_runner_create(&rc, err, sizeof err) : NULL;
    if (!dev) usage_exit(err);
    /* bf16 products store the input [n, D] and the kept O [n_kept, QD] (+1) of
     * each layer in bf16: 2 bytes an element fewer than fp32 (lse stays fp32) */
    model_memory m32, m16;
    model_runner_config rc32 = rc, rc16 = rc;
    rc32.bf16_matmul = 0, rc16.bf16_matmul = 1;
    if (model_runner_memory(&rc32, &m32, err, sizeof err) != 0 ||
        model_runner_memory(&rc16, &m16, err, sizeof err) != 0)
        usage_exit(err);
    int64_t kept = o.fraction >= 1.0 ? layout.n : o.fraction > 0.0 ? layout.n / 2 : 0;
    int64_t QD = (int64_t)dims.n_heads * dims.head_dim;
    int64_t saved = (int64_t)m32.stored - (int64_t)m16.stored,
            want = dims.layers * (layout.n * dims.d_model + kept * QD + 1) * 2;
    if (saved != want) {
        fprintf(stderr, "rank %d: bf16 stored activations take %lld bytes less, expected %lld\n",
                rank, (long long)saved, (long long)want);
        failures++;
    }

    size_t np = (size_t)m.n_params, n = (size_t)layout.n;
    float *params = malloc(np * sizeof(float)), *grads = calloc(np, sizeof(float)),
          *dev_grads = calloc(np, sizeof(float));
    model_init_params(&m, params, 11, 0.2);
    int64_t *pos = malloc(n * sizeof(int64_t)), *tokens = malloc(n * sizeof(int64_t)),
            *labels0 = malloc(n * sizeof(int64_t)), *labels1 = malloc(n * sizeof(int64_t));
    seq_layout_positions(&layout, rank, pos);
    for (size_t i = 0; i < n; i++) { /* every fifth label ignored */
        tokens[i] = (pos[i] * 5 + 2) % dims.vocab;
        labels0[i] = pos[i] % 5 == 4 ? TOKEN_IGNORE : (pos[i] * 3 + 1) % dims.vocab;
        labels1[i] = labels0[i] == TOKEN_IGNORE ? TOKEN_IGNORE : (labels0[i] + 1) % dims.vocab;
    }
    const int64_t *host_labels[MICRO_BATCHES] = {labels0, labels1};
    step_sums hs = forward_backward(host, (model_params){params, NULL}, grads, tokens, host_labels);

    /* the device's parameters: fp32, or bf16 (the host's rounded) */
    uint16_t *rounded = malloc(np * 2);
    if (!rounded || bk_round_bf16(&hq, (int64_t)np, params, rounded) != BK_OK)
        usage_exit("cannot round the parameters");
    void *d_params = o.bf16_matmul ? worker_device_copy(rounded, np * 2)
                                   : worker_device_copy(params, np * sizeof(float));
    model_params dp = {o.bf16_matmul ? NULL : d_params, o.bf16_matmul ? d_params : NULL};
    float *d_grads = worker_device_copy(dev_grads, np * sizeof(float));
    int64_t *d_tokens = worker_device_copy(tokens, n * sizeof(int64_t));
    const int64_t *dev_labels[MICRO_BATCHES] = {worker_device_copy(labels0, n * sizeof(int64_t)),
                                                worker_device_copy(labels1, n * sizeof(int64_t))};
    model_step_stats unused = {0};
    model_params wrong = {o.bf16_matmul ? d_grads : NULL, o.bf16_matmul ? NULL : rounded};
    if (model_forward_backward(dev, 0, wrong, &(model_grads){.whole = d_grads}, d_tokens,
                               dev_labels[0], 0.01f, &(double){0}, &(int64_t){0},
                               &unused) != BT_ERR_ARG) {
        fprintf(stderr, "rank %d: the device runner took parameters of the other type\n", rank);
        failures++;
    }
    step_sums ds = forward_backward(dev, dp, d_grads, d_tokens, dev_labels);
    worker_device_read(dev_grads, d_grads, np * sizeof(float));

    if (ds.valid != hs.valid || !(fabs(ds.loss - hs.loss) <= 1e-2 * fabs(hs.loss))) {
        fprintf(stderr, "rank %d: device loss sum %.6g over %lld tokens, host %.6g over %lld\n",
                rank, ds.loss, (long long)ds.valid, hs.loss, (long long)hs.valid);
        failures++;
    }
    if (rank == 0)
        printf("loss sum: host %.6f, device %.6f (relative %.2e)\n", hs.loss, ds.loss,
               fabs(ds.loss - hs.loss) / fabs(hs.loss));
    compare_gradients(&m, grads, dev_grads);
    failures += compare_predictions(host, dev, (model_params){params, NULL}, dp, tokens, d_tokens,
                                    (int64_t)n);

    model_runner_free(host), model_runner_free(dev);
    bk_device_free(d_params), bk_device_free(d_grads), bk_device_free(d_tokens);
    for (int mb = 0; mb < MICRO_BATCHES; mb++) bk_device_free((void *)dev_labels[mb]);
    model_layout_free(&m);
    free(params), free(rounded), free(grads), free(dev_grads), free(pos), free(tokens),
        free(labels0), free(labels1), free(bits);
    int64_t total_failures = worker_finish();
    if (rank == 0 && !total_failures)
        printf("ok model on the device: %s mask, fraction %g, %d ranks%s\n", o.mask, o.fraction,
               size, o.nodes > 1 ? " (double ring)" : "");
    return total_failures ? WORKER_FAILED : 0;
}
