/* trainer_step.c: one optimizer step (trainer.h): read the step's samples,
 * forward and backward every micro-batch, agree across ranks on a non-finite
 * loss or gradient, then the ZeRO-1 update, whose gradient norm (taken after
 * the reduction, the same on every rank) may still be non-finite. The loss is
 * a mean over every valid token of the step on all ranks. */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "src/train/trainer.h"
#include "util/exit_codes.h"

static int fail(const char *detail)
{
    fprintf(stderr, "burst train: %s\n", detail);
    return EXIT_RUN_FAILURE;
}

/* Reads the step's micro-batches, announces the next step's first sample, and
 * counts the valid labels over all ranks into *valid. */
static int read_samples(trainer *t, int64_t step, int64_t *valid)
{
    const train_config *c = &t->cfg;
    int64_t n = t->layout.n, local_valid = 0;
    for (int mb = 0; mb < c->micro_batches; mb++) {
        int64_t index = trainer_sample_index(c, step, t->dp_rank, mb);
        if (t->data->read(t->data, index, t->tokens + mb * n, t->labels + mb * n) != 0)
            return EXIT_RUN_FAILURE; /* the source said what failed */
        for (int64_t i = 0; i < n; i++) local_valid += t->labels[mb * n + i] != TOKEN_IGNORE;
    }
    if (t->data->prefetch) /* read while this step computes */
        t->data->prefetch(t->data, trainer_sample_index(c, step + 1, t->dp_rank, 0));
    *valid = local_valid;
    if (bt_allreduce(bt_world_comm(t->world), valid, 1, BT_I64, BT_SUM) != BT_OK)
        return fail(bt_world_error(t->world));
    return 0;
}

/* Forward and backward of every micro-batch into t->grads; adds the loss sum
 * and the count of valid tokens into sums[0], *counted. */
static int forward_backward(trainer *t, float scale, double *loss_sum, int64_t *counted)
{
    int64_t n = t->layout.n;
    memset(t->grads, 0, (size_t)t->model.n_params * sizeof(float));
    model_step_stats ms = {0};
    for (int mb = 0; mb < t->cfg.micro_batches; mb++) {
        bt_status st = model_forward_backward(t->runner, mb, t->params, t->grads, t->tokens + mb * n,
                                              t->labels + mb * n, scale, loss_sum, counted, &ms);
        if (st != BT_OK)
            return fail(bt_world_error(t->world)[0] ? bt_world_error(t->world)
                                                        : "a kernel refused its arguments");
    }
    return 0;
}

/* Which rank first saw a non-finite loss or gradient (INT64_MAX: none), and
 * the step's loss: every rank learns both. */
static int agree(trainer *t, double loss_sum, int64_t counted, int64_t *first_bad, double *loss)
{
    int bad = !isfinite(loss_sum);
    for (int64_t i = 0; i < t->model.n_params && !bad; i++) bad = !isfinite(t->grads[i]);
    *first_bad = bad ? t->rank : INT64_MAX;
    double sums[2] = {loss_sum, (double)counted};
    if (bt_allreduce(bt_world_comm(t->world), first_bad, 1, BT_I64, BT_MIN) != BT_OK ||
        bt_allreduce(bt_world_comm(t->world), sums, 2, BT_F64, BT_SUM) != BT_OK)
        return fail(bt_world_error(t->world));
    *loss = sums[1] > 0 ? sums[0] / sums[1] : 0.0;
    return 0;
}

/* A non-finite step (what: where it was seen): skipped (0, *skipped = 1) or
 * every rank stops. Every rank calls it on the same step, having agreed. */
static int nonfinite(trainer *t, int64_t step, const char *what, int *skipped)
{
    if (t->plan.on_nonfinite == NONFINITE_SKIP) {
        if (t->rank == 0)
            fprintf(stderr, "burst train: step %lld: %s; skipping the update ([train] "
                            "on_nonfinite = skip)\n",
                    (long long)step, what);
        *skipped = 1;
        return 0;
    }
    fprintf(stderr, "burst train: rank %d: step %lld: %s; stopping\n", t->rank, (long long)step,
            what);
    return STOP_AGREED;
}

int trainer_step(trainer *t, int64_t step, double *loss, double *gnorm, int *skipped)
{
    const train_config *c = &t->cfg;
    int64_t valid = 0, counted = 0, first_bad;
    double loss_sum = 0;
    *skipped = 0;
    *gnorm = NAN; /* until the optimizer measures it */
    int status = read_samples(t, step, &valid);
    if (status == 0)
        status = forward_backward(t, valid > 0 ? 1.0f / (float)valid : 0.0f, &loss_sum, &counted);
    if (status != 0) return status;
    if (t->opts.inject_step == step && t->opts.inject_rank == t->rank) t->grads[0] = NAN;
    if (t->opts.overflow_step == step) t->grads[0] = FLT_MAX;
    if ((status = agree(t, loss_sum, counted, &first_bad, loss)) != 0) return status;
    char what[96];
    if (first_bad != INT64_MAX) {
        snprintf(what, sizeof what, "non-finite loss or gradient seen on rank %lld",
                 (long long)first_bad);
        return nonfinite(t, step, what, skipped);
    }
    double lr = lr_schedule(c->lr, c->min_lr, c->warmup_steps, c->steps, step);
    if (zero1_step(t->opt, t->params, t->grads, lr, step, gnorm) != BT_OK)
        return fail(bt_world_error(t->world));
    /* Finite gradients everywhere can still sum to an infinite one: the norm is
     * all-reduced, so every rank sees it, and the optimizer updated nothing. */
    if (!isfinite(*gnorm))
        return nonfinite(t, step, "non-finite gradient norm after the reduction", skipped);
    return 0;
}
