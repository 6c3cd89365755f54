/* trainer_eval.c: held-out accuracy after training (trainer.h). DP groups
 * share the samples; the CP group of a sample runs its forward together (under
 * a document mask, within the sample's documents), and each rank predicts the
 * answer rows it holds.
 *   passkey: for each sample of [eval] eval_path, the most likely token at the
 *            answer position against the stored answer;
 *   recall:  samples of the recall task from the held-out seed; only queries
 *            whose pair other ranks hold are counted, so every counted answer
 *            travelled through the ring; with one context-parallel rank there
 *            is no other rank, and every query counts.
 * Rank 0 prints each accuracy with its chance level; one below [eval]
 * min_accuracy fails the run on every rank (the counts are summed over all
 * ranks, so every rank takes the same decision). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/dataset_int64.h"
#include "kernels/device.h"
#include "src/train/trainer_internal.h"
#include "util/alloc.h"
#include "util/exit_codes.h"

/* The transport's error without the "rank R: " it starts with (the caller
 * names this rank). */
static const char *world_reason(trainer *t)
{
    const char *e = bt_world_error(t->world), *colon = strstr(e, ": ");
    return strncmp(e, "rank ", 5) == 0 && colon ? colon + 2 : e;
}

/* The local row of global position pos on this rank, or -1 when another rank
 * holds it. */
static int64_t local_row(const trainer *t, int64_t pos)
{
    int64_t row;
    return seq_layout_owner(&t->layout, pos, &row) == t->cp_rank ? row : -1;
}

int64_t trainer_count_correct(const int64_t *predicted, const int64_t *answers, int64_t n)
{
    int64_t correct = 0;
    for (int64_t i = 0; i < n; i++) correct += predicted[i] == answers[i];
    return correct;
}

/* The sample in t->tokens to the device when the model runs there; 0, or -1
 * with err. */
static int upload_tokens(trainer *t, int64_t s, char *err, size_t err_len)
{
    if (trainer_upload_tokens(t, 1) == 0) return 0;
    snprintf(err, err_len, "cannot copy sample %lld to the device", (long long)s);
    return -1;
}

/* Predicts rows [n] of the sample in t->tokens into predicted [n] (collective
 * over the CP group: every rank calls, n may be 0) and adds the correct
 * answers [n] and n into counts. 0, or -1 with err naming `what`. */
static int predict_and_count(trainer *t, const int64_t *rows, const int64_t *answers, int n,
                             int64_t *predicted, eval_counts *counts, const char *what, char *err,
                             size_t err_len)
{
    const int64_t *tokens = t->choices.on_device ? t->dev_tokens : t->tokens;
    if (model_predict(t->runner, trainer_params(t), tokens, rows, n, predicted) != BT_OK) {
        snprintf(err, err_len, "%s: %s", what, world_reason(t));
        return -1;
    }
    counts->correct += trainer_count_correct(predicted, answers, n);
    counts->total += n;
    return 0;
}

/* Where a DP group's loop over samples [0, samples) (from dp_rank in steps
 * of dp) ends: at samples, or with the parameters gathered (zero = 3, whose
 * gathers every rank must make alike) at the same round for every group;
 * a sample past `samples` then runs an empty prediction (idle_prediction). */
static int64_t samples_end(const trainer *t, int64_t samples)
{
    int64_t dp = t->cfg.dp;
    return trainer_zero_stage(t) == 3 ? (samples + dp - 1) / dp * dp : samples;
}

/* A forward with nothing to predict, over whatever t->tokens holds: its
 * gathers match the other groups'. */
static int idle_prediction(trainer *t, eval_counts *counts, const char *what, char *err,
                           size_t err_len)
{
    return predict_and_count(t, NULL, NULL, 0, NULL, counts, what, err, err_len);
}

/* The counts summed over all ranks into *out, once every rank got this far;
 * 0, or -1 with err (this rank's, or naming another rank). */
static int sum_counts(trainer *t, int failed, const eval_counts *local, eval_counts *out,
                      const char *what, char *err, size_t err_len)
{
    int64_t sums[2] = {local->correct, local->total};
    if (trainer_any_rank(t, failed) ||
        bt_allreduce(bt_world_comm(t->world), sums, 2, BT_I64, BT_SUM) != BT_OK) {
        if (!failed)
            trainer_another_rank_failed(t, what, "evaluation failed on another rank", err, err_len);
        return -1;
    }
    *out = (eval_counts){.correct = sums[0], .total = sums[1]};
    return 0;
}

/* ---- passkey ---------------------------------------------------------- */

/* The answers table [rows, 3] and a source over the eval corpus, on every
 * rank or on none. */
static int open_passkey(trainer *t, int64_t **answers, int64_t *rows, int64_t *cols,
                        token_source **src, char *err, size_t err_len)
{
    const train_config *c = &t->cfg;
    int failed = io_read_int64_dataset(c->eval_path, "/answers", answers, rows, cols, err, err_len) != 0;
    if (!failed && *cols < 3) {
        snprintf(err, err_len, "%s: /answers must have 3 columns (start, answer position, answer)",
                 c->eval_path);
        failed = 1;
    }
    if (!failed)
        *src = hdf5_source_create(c->eval_path, c->vocab, 0, 0, t->segments != NULL, &t->shard,
                                  err, err_len);
    failed |= !*src;
    if (!trainer_any_rank(t, failed)) return 0;
    if (!failed)
        trainer_another_rank_failed(t, c->eval_path, "another rank could not open it", err,
                                    err_len);
    free(*answers);
    if (*src) (*src)->free(*src);
    return -1;
}

/* Sample s of the eval corpus into t's buffers, with its documents under a
 * document mask; 0, or -1 with err. */
static int read_eval_sample(trainer *t, token_source *src, int64_t s, char *err, size_t err_len)
{
    if (src->read(src, s, t->tokens, t->labels) != 0 ||
        (t->segments && src->documents(src, s, t->segments) != 0)) {
        snprintf(err, err_len, "%s: cannot read sample %lld (the reason is above)",
                 t->cfg.eval_path, (long long)s);
        return -1;
    }
    if (upload_tokens(t, s, err, err_len) != 0) return -1;
    return t->segments ? model_runner_set_documents(t->runner, t->segments, err, err_len) : 0;
}

int trainer_eval_passkey(trainer *t, eval_counts *out, char *err, size_t err_len)
{
    const train_config *c = &t->cfg;
    int64_t *answers = NULL, rows = 0, cols = 0;
    eval_counts counts = {0, 0};
    token_source *src = NULL;
    if (open_passkey(t, &answers, &rows, &cols, &src, err, err_len) != 0) return -1;
    int failed = 0;
    int64_t samples = rows < c->eval_samples ? rows : c->eval_samples;
    for (int64_t s = t->dp_rank; s < samples_end(t, samples) && !failed; s += c->dp) {
        if (s >= samples) {
            failed = idle_prediction(t, &counts, c->eval_path, err, err_len) != 0;
            continue;
        }
        const int64_t *a = answers + s * cols; /* start, answer position, answer */
        if (a[0] != s * (c->seq_len + 1)) {
            snprintf(err, err_len, "%s: sample %lld starts at %lld, not at a multiple of [data] "
                                   "seq_len + 1: the eval corpus was made for another seq_len",
                     c->eval_path, (long long)s, (long long)a[0]);
            failed = 1;
            break;
        }
        if (read_eval_sample(t, src, s, err, err_len) != 0) {
            /* This rank alone: the others of its CP group already wait for it
             * in the ring. As in training, it stops and leaves by abort. */
            free(answers);
            src->free(src);
            return EXIT_RUN_FAILURE;
        }
        int64_t row = local_row(t, a[1] - 1), predicted = -1;
        failed = predict_and_count(t, &row, &a[2], row >= 0, &predicted, &counts, c->eval_path,
                                   err, err_len) != 0;
    }
    free(answers);
    src->free(src);
    return sum_counts(t, failed, &counts, out, c->eval_path, err, err_len);
}

/* ---- recall ----------------------------------------------------------- */

int trainer_recall_select(const seq_layout *l, int rank, const recall_query *queries, int n,
                          int64_t *rows, int64_t *answers)
{
    int selected = 0, alone = l->P == 1; /* no other rank: every query */
    for (int i = 0; i < n; i++) {
        int64_t row, other;
        if (seq_layout_owner(l, queries[i].query_pos, &row) != rank ||
            (!alone && (seq_layout_owner(l, queries[i].key_pos, &other) == rank ||
                        seq_layout_owner(l, queries[i].key_pos + 1, &other) == rank)))
            continue;
        rows[selected] = row;
        answers[selected++] = queries[i].answer;
    }
    return selected;
}

/* What the recall evaluation works in: a whole sample, its queries, and the
 * selected rows, their answers and predictions. */
typedef struct {
    int64_t *sample, *rows, *answers, *predicted;
    recall_query *queries;
} recall_buffers;

static void free_recall_buffers(recall_buffers *b)
{
    free(b->sample), free(b->rows), free(b->queries);
}

/* The buffers on every rank, or -1 with err on every rank. */
static int alloc_recall_buffers(trainer *t, const recall_shape *shape, recall_buffers *b,
                                char *err, size_t err_len)
{
    size_t Q = (size_t)shape->queries;
    *b = (recall_buffers){0};
    int failed =
        !(b->sample = bu_calloc((size_t)shape->seq_len * sizeof(int64_t), "a recall sample", err,
                                err_len)) ||
        !(b->rows = bu_calloc(3 * Q * sizeof(int64_t), "the recall answers", err, err_len)) ||
        !(b->queries = bu_calloc(Q * sizeof(recall_query), "the recall queries", err, err_len));
    if (!failed) b->answers = b->rows + Q, b->predicted = b->answers + Q;
    if (!trainer_any_rank(t, failed)) return 0;
    if (!failed)
        trainer_another_rank_failed(t, "recall", "another rank is out of memory", err, err_len);
    free_recall_buffers(b);
    return -1;
}

/* Held-out sample s: whole into b, this rank's tokens into t (and the
 * device); 0, or -1 with err. */
static int load_recall_sample(trainer *t, const recall_shape *shape, uint64_t seed, int64_t s,
                              recall_buffers *b, char *err, size_t err_len)
{
    if (recall_sample(shape, seed, s, b->sample, NULL, b->queries) != 0) {
        snprintf(err, err_len, "recall: sample %lld: out of memory", (long long)s);
        return -1;
    }
    seq_layout_scatter(&t->layout, t->cp_rank, b->sample, t->tokens, sizeof(int64_t));
    return upload_tokens(t, s, err, err_len);
}

int trainer_eval_recall(trainer *t, eval_counts *out, char *err, size_t err_len)
{
    const train_config *c = &t->cfg;
    recall_shape shape = train_config_recall(c);
    recall_buffers b;
    if (alloc_recall_buffers(t, &shape, &b, err, err_len) != 0) return -1;
    uint64_t seed = synthetic_heldout_seed(c->data_seed);
    eval_counts counts = {0, 0};
    int failed = 0;
    for (int64_t s = t->dp_rank; s < samples_end(t, c->eval_samples) && !failed; s += c->dp) {
        if (s >= c->eval_samples) {
            failed = idle_prediction(t, &counts, "recall", err, err_len) != 0;
            continue;
        }
        if (load_recall_sample(t, &shape, seed, s, &b, err, err_len) != 0) {
            free_recall_buffers(&b);
            return EXIT_RUN_FAILURE; /* this rank alone, as a passkey read failure */
        }
        int n = trainer_recall_select(&t->layout, t->cp_rank, b.queries, shape.queries, b.rows,
                                      b.answers);
        failed = predict_and_count(t, b.rows, b.answers, n, b.predicted, &counts, "recall", err,
                                   err_len) != 0;
    }
    free_recall_buffers(&b);
    return sum_counts(t, failed, &counts, out, "recall", err, err_len);
}

/* ---- the report ------------------------------------------------------- */

/* Rank 0's line of one evaluation, and the verdict of [eval] min_accuracy on
 * every rank (the counts are the same everywhere): 0 or STOP_AGREED. */
static int report_accuracy(const trainer *t, const char *what, const char *counted,
                           const eval_counts *e, double chance)
{
    double min = t->cfg.min_accuracy, accuracy = e->total ? (double)e->correct / (double)e->total : 0;
    if (t->rank == 0)
        printf("eval: %s accuracy %.1f%% over %lld %s (chance %.1f%%)\n", what, 100.0 * accuracy,
               (long long)e->total, counted, 100.0 * chance);
    fflush(stdout); /* the line above comes before the verdict below */
    if (min <= 0 || (e->total > 0 && accuracy >= min)) return 0;
    if (t->rank == 0)
        fprintf(stderr,
                "burst train: eval: %s accuracy %.1f%% over %lld %s is below [eval] "
                "min_accuracy = %g%%\n",
                what, 100.0 * accuracy, (long long)e->total, counted, 100.0 * min);
    return STOP_AGREED;
}

typedef int (*eval_fn)(trainer *t, eval_counts *out, char *err, size_t err_len);

/* One evaluation and its report: 0, STOP_AGREED, or EXIT_RUN_FAILURE when
 * this rank alone failed. */
static int evaluate(trainer *t, eval_fn run, const char *what, const char *counted, double chance)
{
    eval_counts e;
    char err[512] = "";
    int status = run(t, &e, err, sizeof err);
    if (status != 0) {
        fprintf(stderr, "burst train: rank %d: evaluation: %s\n", t->rank, err);
        return status == EXIT_RUN_FAILURE ? status : STOP_AGREED;
    }
    return report_accuracy(t, what, counted, &e, chance);
}

int trainer_evaluate(trainer *t)
{
    const train_config *c = &t->cfg;
    int status = 0;
    if (c->eval_path[0])
        status = evaluate(t, trainer_eval_passkey, "passkey retrieval", "held-out samples",
                          1.0 / c->vocab);
    if (status == 0 && t->choices.recall)
        status = evaluate(t, trainer_eval_recall, "recall",
                          t->layout.P > 1 ? "cross-rank queries"
                                          : "queries (one context-parallel rank: all queries)",
                          1.0 / c->recall_values);
    return status;
}
