/* trainer_nll.c: `burst eval`'s negative log-likelihood over a corpus (see
 * trainer.h): each sample's per-token losses come back from the fused head
 * (model_forward_loss), are summed per sample and per position bucket on each
 * rank, and the sums are added over the world in one allreduce. */
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "src/train/trainer_internal.h"
#include "util/alloc.h"
#include "util/exit_codes.h"

/* Position buckets: [0, 1), [1, 2), [2, 4), ... [2^(B-2), 2^(B-1)). */
enum { N_BUCKETS = 64 };

static int bucket_of(int64_t pos)
{
    int b = 0;
    while (pos > 0) pos >>= 1, b++;
    return b;
}

static int64_t bucket_start(int b)
{
    return b == 0 ? 0 : (int64_t)1 << (b - 1);
}

/* The sums one rank adds, one array so that one allreduce adds them all:
 * nll then tokens of each sample [S], then of each bucket [N_BUCKETS]. */
typedef struct {
    int64_t samples;
    double *sum; /* [2 S + 2 N_BUCKETS] */
} nll_sums;

static double *sample_nll(nll_sums *a, int64_t s)
{
    return &a->sum[s];
}
static double *sample_tokens(nll_sums *a, int64_t s)
{
    return &a->sum[a->samples + s];
}
static double *bucket_nll(nll_sums *a, int b)
{
    return &a->sum[2 * a->samples + b];
}
static double *bucket_tokens(nll_sums *a, int b)
{
    return &a->sum[2 * a->samples + N_BUCKETS + b];
}

/* Sample s read into the trainer's buffers (and the device's). */
static int read_sample(trainer *t, int64_t s, char *err, size_t err_len)
{
    if (trainer_read_sample(t, s, 0) != 0) {
        snprintf(err, err_len, "cannot read sample %" PRId64 " (the reason is above)", s);
        return -1;
    }
    if (trainer_upload_tokens(t, 1) != 0) {
        snprintf(err, err_len, "cannot copy sample %" PRId64 " to the device", s);
        return -1;
    }
    return t->segments ? model_runner_set_documents(t->runner, t->segments, err, err_len) : 0;
}

/* Row losses [n] of sample s, in the shard's order, into the sums. */
static void add_rows(const trainer *t, const float *row_loss, int64_t s, nll_sums *a)
{
    const token_shard *sh = &t->shard;
    int64_t i = 0;
    for (int c = 0; c < sh->n_chunks; c++)
        for (int64_t p = sh->chunks[c].begin; p < sh->chunks[c].end; p++, i++) {
            if (t->labels[i] == TOKEN_IGNORE) continue;
            int b = bucket_of(p);
            *sample_nll(a, s) += row_loss[i];
            *sample_tokens(a, s) += 1;
            *bucket_nll(a, b) += row_loss[i];
            *bucket_tokens(a, b) += 1;
        }
}

/* This rank's part of every sample its dp group takes. 0, or -1 with err. */
static int eval_samples(trainer *t, nll_sums *a, float *row_loss, char *err, size_t err_len)
{
    const int64_t *tokens = t->choices.on_device ? t->dev_tokens : t->tokens;
    const int64_t *labels = t->choices.on_device ? t->dev_labels : t->labels;
    int64_t done = 0, mine = (a->samples - t->dp_rank + t->cfg.dp - 1) / t->cfg.dp;
    for (int64_t s = t->dp_rank; s < a->samples; s += t->cfg.dp) {
        double loss = 0;
        int64_t valid = 0;
        if (read_sample(t, s, err, err_len) != 0) return -1;
        if (model_forward_loss(t->runner, trainer_params(t), tokens, labels, &loss, &valid,
                               row_loss) != BT_OK) {
            snprintf(err, err_len, "sample %" PRId64 ": %s", s, bt_world_error(t->world));
            return -1;
        }
        add_rows(t, row_loss, s, a);
        if (t->rank == 0 && (++done % 16 == 0 || done == mine))
            fprintf(stderr, "eval: %" PRId64 " of %" PRId64 " samples\r%s", done, mine,
                    done == mine ? "\n" : "");
    }
    return 0;
}

static double mean(double nll, double tokens)
{
    return tokens > 0 ? nll / tokens : NAN;
}

static int write_json(nll_sums *a, double nll, double tokens, const char *path, char *err,
                      size_t err_len)
{
    json_t *samples = json_array(), *buckets = json_array();
    for (int64_t s = 0; s < a->samples; s++)
        json_array_append_new(samples, json_pack("{s:I, s:f}", "index", (json_int_t)s, "nll",
                                                 mean(*sample_nll(a, s), *sample_tokens(a, s))));
    for (int b = 0; b < N_BUCKETS; b++)
        if (*bucket_tokens(a, b) > 0)
            json_array_append_new(
                buckets, json_pack("{s:I, s:I, s:I, s:f}", "start", (json_int_t)bucket_start(b),
                                   "end", (json_int_t)bucket_start(b + 1), "tokens",
                                   (json_int_t)*bucket_tokens(a, b), "nll",
                                   mean(*bucket_nll(a, b), *bucket_tokens(a, b))));
    json_t *root = json_pack("{s:f, s:I, s:o, s:o}", "nll", mean(nll, tokens), "tokens",
                             (json_int_t)tokens, "samples", samples, "by_position", buckets);
    int rc = root && json_dump_file(root, path, JSON_INDENT(1)) == 0 ? 0 : -1;
    json_decref(root);
    if (rc != 0) snprintf(err, err_len, "--out %s: cannot be written", path);
    return rc;
}

/* Rank 0's report of the summed losses. */
static int report(nll_sums *a, const char *out_json, char *err, size_t err_len)
{
    double nll = 0, tokens = 0;
    for (int b = 0; b < N_BUCKETS; b++) nll += *bucket_nll(a, b), tokens += *bucket_tokens(a, b);
    if (tokens == 0) {
        snprintf(err, err_len, "no token to predict in %" PRId64 " samples", a->samples);
        return EXIT_USAGE;
    }
    printf("eval: nll %.6f over %.0f tokens (ppl %.4f)\n", nll / tokens, tokens, exp(nll / tokens));
    fflush(stdout);
    return out_json && write_json(a, nll, tokens, out_json, err, err_len) != 0 ? EXIT_RUN_FAILURE
                                                                               : 0;
}

int trainer_eval_nll(trainer *t, int64_t samples, const char *out_json, char *err, size_t err_len)
{
    nll_sums a = {.samples = t->data->n_samples};
    if (samples > 0 && (a.samples == 0 || samples < a.samples)) a.samples = samples;
    if (a.samples <= 0) {
        snprintf(err, err_len, "--samples: the data source is unbounded; say how many");
        return EXIT_USAGE;
    }
    size_t count = (size_t)(2 * a.samples + 2 * N_BUCKETS);
    a.sum = bu_calloc(count * sizeof(double), "the evaluation's sums", err, err_len);
    float *row_loss =
        bu_calloc((size_t)t->layout.n * sizeof(float) + 1, "the row losses", err, err_len);
    int failed = !a.sum || !row_loss || eval_samples(t, &a, row_loss, err, err_len) != 0;
    free(row_loss);
    int status = 0;
    if (trainer_any_rank(t, failed) ||
        bt_allreduce(bt_world_comm(t->world), a.sum, count, BT_F64, BT_SUM) != BT_OK) {
        if (!failed)
            trainer_another_rank_failed(t, "the evaluation", "failed on another rank", err,
                                        err_len);
        status = failed ? EXIT_RUN_FAILURE : STOP_AGREED;
    } else if (t->rank == 0) {
        status = report(&a, out_json, err, err_len);
    }
    free(a.sum);
    return status;
}
