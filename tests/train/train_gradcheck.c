/* train_gradcheck.c: the tiny model under each mask of the trainer, on one
 * rank or on a context-parallel group under `burst run` (the ring included).
 *
 * 1. Gradients against central finite differences of the loss: every entry of
 *    the tensors of at most SMALL_TENSOR entries (norm gains, K and V
 *    projections) and a spread sample of the larger ones. The model runs in
 *    fp32, so the differences use a step large enough for fp32 and a
 *    tolerance that says so.
 * 2. What the mask promises: the tokens before a cut are changed, and the loss
 *    of the tokens beyond the mask's reach through both layers must not move
 *    (documents, block-sparse, window), while under the causal mask it must.
 *
 * Prints "ok gradcheck" on rank 0, exits 1 on a mismatch.
 * Usage: train_gradcheck [--mask causal|window|document|sparse] [--fraction F]
 *                        [--fused 0|1] [--bwd auto|q|kv] [--piece-rows R]
 *                        [--chunk-rows R]  (the MLP in chunks of R tokens)
 *                        [--keep-layers 0|1]  (the layers' intermediates kept) */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "src/train/data/token_source.h"
#include "src/train/model.h"
#include "tests/lib/rope_cases.h"
#include "tests/lib/worker_util.h"

enum { SMALL_TENSOR = 128, SAMPLES_OF_LARGE = 8, MAX_TENSORS = 32 };

typedef struct {
    const char *mask, *bwd;
    double fraction;
    int fused, keep_layers;
    int64_t piece_rows, chunk_rows;
} options;

/* The sequence, its mask and the cut of the isolation check. */
typedef struct {
    int64_t N;
    seq_layout layout;
    bk_attn_mask mask;
    uint64_t *bits;      /* mask = sparse */
    int32_t *segments;   /* [N + 1] mask = document, else NULL */
    int64_t changed_end; /* the tokens [0, changed_end) are changed ... */
    int64_t tail_begin;  /* ... and the loss from here on must not move */
    int isolates;        /* 0: causal, where it must move */
} problem;

static void usage_exit(const char *why)
{
    fprintf(stderr, "train_gradcheck: %s\n", why);
    exit(WORKER_USAGE);
}

/* Documents of 5, 1, 9, 7, 3 and 12 tokens, over and over (ids of 0..N). */
static int32_t *documents(int64_t N)
{
    static const int64_t lengths[] = {5, 1, 9, 7, 3, 12};
    int32_t *seg = malloc((size_t)(N + 1) * sizeof(int32_t)), doc = 0;
    int64_t left = lengths[0]; /* tokens of the current document still to come */
    for (int64_t p = 0; p <= N; p++, left--) {
        if (left == 0) left = lengths[++doc % 6];
        seg[p] = doc;
    }
    return seg;
}

/* Two layers carry a change forward by at most twice a mask's reach. */
static problem make_problem(const char *mask, int P)
{
    problem pb = {.N = 16 * (int64_t)P, .changed_end = 4, .isolates = 1};
    char err[256];
    int kind = train_config_value("parallel", "mask", mask);
    if (kind < 0) usage_exit("--mask: causal, window, document or sparse");
    pb.mask = choose_mask((train_mask_choice)kind, 6);
    if (kind == MASK_CHOICE_CAUSAL) {
        pb.isolates = 0;
        pb.tail_begin = 12;
    } else if (kind == MASK_CHOICE_WINDOW) { /* 6 tokens: a key reaches 5 queries on */
        pb.tail_begin = 4 + 2 * 5;
    } else if (kind == MASK_CHOICE_DOCUMENT) { /* the first document, untouched by the rest */
        pb.segments = documents(pb.N);
        pb.changed_end = pb.tail_begin = 5;
    } else { /* sparse: blocks of 4 seeing themselves and the previous */
        if (choose_sparse_mask("local:2", 4, pb.N, &pb.mask, &pb.bits, err, sizeof err) != 0)
            usage_exit(err);
        pb.tail_begin = 3 * 4;
    }
    seq_layout_kind layout = choose_layout(LAYOUT_CHOICE_AUTO, (train_mask_choice)kind);
    if (seq_layout_init(&pb.layout, layout, P, pb.N, err, sizeof err) != 0)
        usage_exit(err);
    return pb;
}

static double loss_of(model_runner *r, const float *params, float *grads, int64_t n_params,
                      const int64_t *tokens, const int64_t *labels, int64_t n_valid_total)
{
    memset(grads, 0, (size_t)n_params * sizeof(float));
    double sums[1] = {0};
    int64_t valid = 0;
    model_step_stats st = {0};
    float scale = n_valid_total > 0 ? 1.0f / (float)n_valid_total : 0.0f;
    must(model_forward_backward(r, 0, (model_params){params, NULL}, &(model_grads){.whole = grads},
                                tokens, labels, scale, &sums[0], &valid, &st),
         "forward/backward");
    must(bt_allreduce(bt_world_comm(world), sums, 1, BT_F64, BT_SUM), "loss allreduce");
    return n_valid_total > 0 ? sums[0] / (double)n_valid_total : 0.0;
}

static int64_t count_valid(const int64_t *labels, int64_t n)
{
    int64_t valid = 0;
    for (int64_t i = 0; i < n; i++) valid += labels[i] != TOKEN_IGNORE;
    must(bt_allreduce(bt_world_comm(world), &valid, 1, BT_I64, BT_SUM), "count allreduce");
    return valid;
}

typedef struct {
    char name[32];
    int64_t offset, count;
} tensor;

/* Every parameter tensor of the model, in layout order. */
static int list_tensors(const model_layout *m, tensor *out)
{
    const model_dims *d = &m->dims;
    int64_t D = d->d_model, QD = (int64_t)d->n_heads * d->head_dim,
            KD = (int64_t)d->n_kv_heads * d->head_dim, F = d->d_ff, V = d->vocab;
    int n = 0;
    out[n++] = (tensor){"embedding", m->embed, V * D};
    for (int l = 0; l < d->layers; l++) {
        const layer_offsets *o = &m->layer[l];
        const struct {
            const char *name;
            int64_t offset, count;
        } per_layer[] = {{"attn_norm", o->attn_norm, D},
                         {"wq", o->wq, D * QD},
                         {"wk", o->wk, D * KD},
                         {"wv", o->wv, D * KD},
                         {"wo", o->wo, QD * D},
                         {"mlp_norm", o->mlp_norm, D},
                         {"w_gate_up", o->w_gate_up, D * 2 * F},
                         {"w_down", o->w_down, F * D}};
        for (int k = 0; k < 8; k++) {
            out[n] = (tensor){"", per_layer[k].offset, per_layer[k].count};
            snprintf(out[n++].name, sizeof out[0].name, "layer%d.%s", l, per_layer[k].name);
        }
    }
    out[n++] = (tensor){"final_norm", m->final_norm, D};
    if (!d->tied) out[n++] = (tensor){"head", m->head, V * D};
    return n;
}

/* Central differences of the loss against the analytic gradient grads. */
static int check_gradients(model_runner *r, const model_layout *m, float *params,
                           const float *grads, const int64_t *tokens, const int64_t *labels,
                           int64_t valid_total)
{
    float *scratch = malloc((size_t)m->n_params * sizeof(float));
    tensor tensors[MAX_TENSORS];
    int n_tensors = list_tensors(m, tensors), checked = 0;
    const double h = 1e-2;
    for (int t = 0; t < n_tensors; t++) {
        int64_t count = tensors[t].count, all = count <= SMALL_TENSOR;
        for (int64_t k = 0; k < (all ? count : SAMPLES_OF_LARGE); k++) {
            int64_t i = tensors[t].offset +
                        (all ? k : (int64_t)(((uint64_t)k * 2654435761u) % (uint64_t)count));
            float saved = params[i];
            params[i] = saved + (float)h;
            double up = loss_of(r, params, scratch, m->n_params, tokens, labels, valid_total);
            params[i] = saved - (float)h;
            double down = loss_of(r, params, scratch, m->n_params, tokens, labels, valid_total);
            params[i] = saved;
            double fd = (up - down) / (2 * h), g = grads[i];
            checked++;
            if (!(fabs(fd - g) <= 2e-3 + 3e-2 * fabs(fd))) {
                if (rank == 0)
                    fprintf(stderr, "%s[%lld]: gradient %.6g, finite difference %.6g\n",
                            tensors[t].name, (long long)(i - tensors[t].offset), g, fd);
                failures++;
            }
        }
    }
    free(scratch);
    return checked;
}

/* The loss of the tokens from tail_begin on, with the tokens before
 * changed_end as they are and changed: equal when the mask isolates them. */
static void check_isolation(model_runner *r, const model_layout *m, const problem *pb,
                            const float *params, const int64_t *pos, const int64_t *tokens,
                            const int64_t *labels, const char *mask)
{
    int64_t n = pb->layout.n, V = m->dims.vocab;
    int64_t *changed = malloc((size_t)n * sizeof(int64_t)),
            *tail = malloc((size_t)n * sizeof(int64_t));
    float *grads = malloc((size_t)m->n_params * sizeof(float));
    for (int64_t i = 0; i < n; i++) {
        changed[i] = pos[i] < pb->changed_end ? (tokens[i] + 1) % V : tokens[i];
        tail[i] = pos[i] >= pb->tail_begin ? labels[i] : TOKEN_IGNORE;
    }
    int64_t valid = count_valid(tail, n);
    double same = loss_of(r, params, grads, m->n_params, tokens, tail, valid);
    double moved = loss_of(r, params, grads, m->n_params, changed, tail, valid);
    double diff = fabs(moved - same);
    if (pb->isolates ? !(diff <= 1e-9 * fabs(same)) : !(diff > 1e-6 * fabs(same))) {
        if (rank == 0)
            fprintf(stderr,
                    "%s mask: changing tokens [0, %lld) moved the loss from position %lld "
                    "on by %.3g (%s)\n",
                    mask, (long long)pb->changed_end, (long long)pb->tail_begin, diff,
                    pb->isolates ? "it must not" : "it must");
        failures++;
    }
    free(changed), free(tail), free(grads);
}

static options parse_options(int argc, char **argv)
{
    options o = {"causal", "auto", 1.0, 1, 0, 0, 0};
    for (int i = 1; i < argc; i += 2) {
        if (i + 1 >= argc) usage_exit("an option without its value");
        const char *v = argv[i + 1];
        if (strcmp(argv[i], "--mask") == 0)
            o.mask = v;
        else if (strcmp(argv[i], "--bwd") == 0)
            o.bwd = v;
        else if (strcmp(argv[i], "--fraction") == 0)
            o.fraction = atof(v);
        else if (strcmp(argv[i], "--fused") == 0)
            o.fused = atoi(v);
        else if (strcmp(argv[i], "--piece-rows") == 0)
            o.piece_rows = atoll(v);
        else if (strcmp(argv[i], "--chunk-rows") == 0)
            o.chunk_rows = atoll(v);
        else if (strcmp(argv[i], "--keep-layers") == 0)
            o.keep_layers = atoi(v);
        else
            usage_exit("unknown option (see the file's top comment)");
    }
    return o;
}

int main(int argc, char **argv)
{
    options o = parse_options(argc, argv);
    char err[512];
    worker_init("train_gradcheck");
    model_dims dims = {.layers = 2,
                       .d_model = 16,
                       .n_heads = 2,
                       .n_kv_heads = 1,
                       .head_dim = 8,
                       .d_ff = 24,
                       .vocab = 19,
                       .tied = 0,
                       .rope = test_rope(3, 10000.0), /* yarn: a ramp and a scale */
                       .norm_eps = 1e-5f};
    model_layout m;
    model_layout_init(&m, &dims);
    problem pb = make_problem(o.mask, size);
    int backward = train_config_value("parallel", "backward", o.bwd);
    if (backward < 0) usage_exit("--bwd: auto, q or kv");
    bk_queue q = bk_host_queue();
    model_runner_config rc = {
        .model = &m,
        .cp = bt_world_comm(world),
        .layout = pb.layout,
        .topo = TOPO_FLAT,
        .nodes = 1,
        .mask = pb.mask,
        .backward = (ring_bwd_choice)backward,
        .piece_rows = o.piece_rows,
        .chunk_rows = o.chunk_rows,
        .keep = choose_keep(o.fraction),
        .keep_layers = o.keep_layers,
        .micro_batches = 1,
        .fused_head = o.fused,
        .head = {.chunk_tokens = 5, .z_loss = 1e-3f, .ignore_index = TOKEN_IGNORE},
        .queue = &q};
    model_runner *r = model_runner_create(&rc, err, sizeof err);
    if (!r || (pb.segments && model_runner_set_documents(r, pb.segments, err, sizeof err) != 0)) {
        fprintf(stderr, "%s\n", err);
        return WORKER_FAILED;
    }
    float *params = malloc((size_t)m.n_params * sizeof(float)),
          *grads = malloc((size_t)m.n_params * sizeof(float));
    model_init_params(&m, params, 7, 0.3); /* large weights: gradients well above fp32 noise */
    /* this rank's share of the global sequence; every third label ignored, and
     * the last token of each document predicts nothing */
    int64_t n = pb.layout.n, *pos = malloc((size_t)n * sizeof(int64_t)),
            *tokens = malloc((size_t)n * sizeof(int64_t)),
            *labels = malloc((size_t)n * sizeof(int64_t));
    seq_layout_positions(&pb.layout, rank, pos);
    for (int64_t i = 0; i < n; i++) {
        tokens[i] = (pos[i] * 7 + 3) % dims.vocab;
        labels[i] = pos[i] % 3 == 2 ? TOKEN_IGNORE : ((pos[i] + 1) * 7 + 3) % dims.vocab;
    }
    token_shard shard = token_shard_of(&pb.layout, rank);
    if (pb.segments) token_shard_end_documents(&shard, pb.segments, labels);
    int64_t valid_total = count_valid(labels, n);

    loss_of(r, params, grads, m.n_params, tokens, labels, valid_total);
    /* the analytic gradient is a sum over ranks */
    must(bt_allreduce(bt_world_comm(world), grads, (size_t)m.n_params, BT_F32, BT_SUM),
         "gradient allreduce");
    int checked = check_gradients(r, &m, params, grads, tokens, labels, valid_total);
    check_isolation(r, &m, &pb, params, pos, tokens, labels, o.mask);

    model_runner_free(r);
    model_layout_free(&m);
    int64_t total_failures = worker_finish();
    if (rank == 0 && !total_failures)
        printf("ok gradcheck: %d entries, %s mask, fraction %g, %s head, backward %s, %d ranks\n",
               checked, o.mask, o.fraction, o.fused ? "fused" : "unfused", o.bwd, size);
    free(params), free(grads), free(pos), free(tokens), free(labels), free(pb.segments),
        free(pb.bits);
    return total_failures ? WORKER_FAILED : 0;
}
