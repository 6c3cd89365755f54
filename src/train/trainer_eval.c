/* trainer_eval.c: passkey retrieval after training (trainer.h). For each
 * held-out sample of [eval] eval_path, the most likely token at the answer
 * position is compared with the answer; DP groups share the samples, the CP
 * group of a sample runs its forward together (under a document mask, within
 * the eval corpus's documents). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/dataset_int64.h"
#include "kernels/device.h"
#include "src/train/trainer.h"
#include "util/exit_codes.h"

/* The answers table [rows, 3] and a source over the eval corpus, on every
 * rank or on none. */
static int open_eval(trainer *t, int64_t **answers, int64_t *rows, int64_t *cols,
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
    if (!failed) snprintf(err, err_len, "%s: another rank could not open it", c->eval_path);
    free(*answers);
    if (*src) (*src)->free(*src);
    return -1;
}

/* The transport's error without the "rank R: " it starts with (the caller
 * names this rank). */
static const char *world_reason(trainer *t)
{
    const char *e = bt_world_error(t->world), *colon = strstr(e, ": ");
    return strncmp(e, "rank ", 5) == 0 && colon ? colon + 2 : e;
}

/* The local row of global position pos, or -1 when another rank holds it. */
static int64_t local_row(const trainer *t, int64_t pos)
{
    const int64_t *positions = model_runner_positions(t->runner);
    for (int64_t i = 0; i < t->layout.n; i++)
        if (positions[i] == pos) return i;
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
    size_t bytes = (size_t)t->layout.n * sizeof(int64_t);
    if (t->plan.on_device && bk_device_upload(&t->queue, t->dev_tokens, t->tokens, bytes) != BK_OK) {
        snprintf(err, err_len, "cannot copy sample %lld to the device", (long long)s);
        return -1;
    }
    return t->segments ? model_runner_set_documents(t->runner, t->segments, err, err_len) : 0;
}

int trainer_evaluate(trainer *t, int64_t *correct, int64_t *total, char *err, size_t err_len)
{
    const train_config *c = &t->cfg;
    int64_t *answers = NULL, rows = 0, cols = 0, counts[2] = {0, 0};
    token_source *src = NULL;
    *correct = *total = 0;
    if (open_eval(t, &answers, &rows, &cols, &src, err, err_len) != 0) return -1;
    int failed = 0;
    int64_t samples = rows < c->eval_samples ? rows : c->eval_samples;
    for (int64_t s = t->dp_rank; s < samples && !failed; s += c->dp) {
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
        const int64_t *tokens = t->plan.on_device ? t->dev_tokens : t->tokens;
        if (model_predict(t->runner, t->params, tokens, &row, row >= 0, &predicted) != BT_OK) {
            snprintf(err, err_len, "%s: %s", c->eval_path, world_reason(t));
            failed = 1;
        }
        if (row >= 0) {
            counts[0] += predicted == a[2];
            counts[1]++;
        }
    }
    free(answers);
    src->free(src);
    if (trainer_any_rank(t, failed) ||
        bt_allreduce(bt_world_comm(t->world), counts, 2, BT_I64, BT_SUM) != BT_OK) {
        if (!failed) snprintf(err, err_len, "%s: evaluation failed on another rank", c->eval_path);
        return -1;
    }
    *correct = counts[0];
    *total = counts[1];
    return 0;
}
