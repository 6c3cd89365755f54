/* trainer_step.c: one optimizer step (trainer.h): read the step's samples
 * (and, under a document mask, their documents), forward and backward every
 * micro-batch, agree across ranks on a non-finite loss or gradient, then the
 * ZeRO update (src/train/zero.h), whose gradient norm (taken after the
 * reduction, the same on every rank) may still be non-finite. The model
 * writes the gradients into ZeRO's sink and, at zero = 3, reads the
 * parameters from its source: the trainer only wires them (trainer.c).
 * The loss is a mean over every valid
 * token of the step on all ranks; the attention pairs the mask allowed in the
 * step's sequences are summed alongside (the FLOPs reports count). On a device
 * the samples are read on the host and copied to the device's token buffers;
 * the gradients never leave the device (their finiteness is asked of the norm
 * kernel). */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "src/attn/attn_need.h"
#include "src/attn/kernel_status.h"
#include "src/train/trainer_internal.h"
#include "util/exit_codes.h"

static int fail(const char *detail)
{
    fprintf(stderr, "burst train: %s\n", detail);
    return EXIT_RUN_FAILURE;
}

/* `what` failed with st, the engine's status: the transport's error when it
 * holds one, else "what: " and the kernels' (a refused call, or a device
 * error with CUDA's message; src/attn/kernel_status.h). */
static int fail_with(const trainer *t, const char *what, bt_status st)
{
    if (bt_world_error(t->world)[0]) return fail(bt_world_error(t->world));
    char msg[512], kernels[320];
    snprintf(msg, sizeof msg, "%s: %s", what, attn_kernel_failure(st, kernels, sizeof kernels));
    return fail(msg);
}

/* Reads the step's micro-batches, announces the next step's first sample,
 * and counts the valid labels over all ranks into *valid. */
static int read_samples(trainer *t, int64_t step, int64_t *valid)
{
    const train_config *c = &t->cfg;
    int64_t n = t->layout.n, local_valid = 0;
    for (int mb = 0; mb < c->micro_batches; mb++) {
        if (trainer_read_sample(t, trainer_sample_index(c, step, t->dp_rank, mb), mb) != 0)
            return EXIT_RUN_FAILURE; /* the source said what failed */
        for (int64_t i = 0; i < n; i++) local_valid += t->labels[mb * n + i] != TOKEN_IGNORE;
    }
    if (t->data->prefetch) /* read while this step computes */
        t->data->prefetch(t->data, trainer_sample_index(c, step + 1, t->dp_rank, 0));
    if (trainer_upload_tokens(t, c->micro_batches) != 0)
        return fail("cannot copy the step's tokens to the device");
    *valid = local_valid;
    if (bt_allreduce(bt_world_comm(t->world), valid, 1, BT_I64, BT_SUM) != BT_OK)
        return fail(bt_world_error(t->world));
    return 0;
}

/* The (query, key) pairs the mask allows in this rank's sequences of the
 * step (under the document mask, in their own documents), counted by the
 * first rank of each CP group only: the others hold the same sequences, so
 * the sum over the world is the attention work of the step. */
static double sequence_pairs(const trainer *t)
{
    if (t->cp_rank != 0) return 0;
    double pairs = 0;
    for (int mb = 0; mb < t->cfg.micro_batches; mb++) {
        attn_need_ctx need = {
            .mask = t->choices.mask, .segments = trainer_segments(t, mb), .N = t->cfg.seq_len};
        pairs += (double)attn_need_sequence_pairs(&need);
        if (!need.segments) return pairs * t->cfg.micro_batches; /* the same every sequence */
    }
    return pairs;
}

/* Bytes this rank has sent on the attention rings' channels so far. */
static double ring_bytes_sent(trainer *t)
{
    double sent = 0;
    for (int ch = 0; ch < RING_N_CHANNELS; ch++)
        sent += (double)bt_counter_get(t->world, ch).sent_bytes;
    return sent;
}

/* Forward and backward of every micro-batch into the optimizer's gradient
 * sink (t->grads, or with zero >= 2 its block), each on the rings planned for
 * its documents; adds the loss sum and the count of valid tokens into
 * *loss_sum, *counted, and sets this rank's ring bytes and times in res. */
static int forward_backward(trainer *t, float scale, double *loss_sum, int64_t *counted,
                            trainer_step_result *res)
{
    int64_t n = t->layout.n;
    bt_status st = zero_sink_clear(t->opt);
    if (st != BT_OK) return fail_with(t, "clearing the gradients", st);
    const int64_t *tokens = t->choices.on_device ? t->dev_tokens : t->tokens,
                  *labels = t->choices.on_device ? t->dev_labels : t->labels;
    model_step_stats ms = {0};
    double sent_before = ring_bytes_sent(t);
    for (int mb = 0; mb < t->cfg.micro_batches; mb++) {
        char err[256];
        int last = mb + 1 == t->cfg.micro_batches;
        if (trainer_segments(t, mb) &&
            model_runner_set_documents(t->runner, trainer_segments(t, mb), err, sizeof err) != 0)
            return fail(err);
        /* the testing aids' fault, into the last micro-batch's first gradient */
        if (last) zero_sink_fault(t->opt, trainer_injected_fault(t));
        st = model_forward_backward(t->runner, mb, trainer_params(t), t->grad_sink, tokens + mb * n,
                                    labels + mb * n, scale, loss_sum, counted, &ms);
        /* the embedding's window is the next micro-batch's: its sum first */
        if (st == BT_OK && !last) st = zero_sink_arrived(t->opt);
        if (st != BT_OK) return fail_with(t, "forward and backward", st);
    }
    res->attn_bytes = ring_bytes_sent(t) - sent_before;
    res->attn_s = ms.attn_fwd_s + ms.attn_bwd_s + ms.attn_recompute_s;
    res->exposed_s = ms.attn_wait_s;
    zero_exposed_times(t->opt, &res->reduce_s, &res->gather_s);
    res->offload_s = ms.offload_wait_s;
    return 0;
}

/* Which rank first saw a non-finite loss or gradient (INT64_MAX: none), the
 * step's loss, the rings' bytes and the attention pairs of all ranks and the
 * rings' slowest times: every
 * rank learns them. */
static int agree(trainer *t, double loss_sum, int64_t counted, int64_t *first_bad,
                 trainer_step_result *res)
{
    /* squares of finite floats sum to a finite double: the norm is finite
     * exactly when every gradient is (zero >= 2: summed range by range) */
    double sq = 0;
    bt_status st = zero_sink_sqnorm(t->opt, &sq);
    if (st != BT_OK) return fail_with(t, "the gradient norm", st);
    int bad = !isfinite(loss_sum) || !isfinite(sq);
    *first_bad = bad ? t->rank : INT64_MAX;
    double sums[4] = {loss_sum, (double)counted, res->attn_bytes, sequence_pairs(t)};
    double slowest[5] = {res->attn_s, res->exposed_s, res->reduce_s, res->gather_s, res->offload_s};
    bt_comm *all = bt_world_comm(t->world);
    if (bt_allreduce(all, first_bad, 1, BT_I64, BT_MIN) != BT_OK ||
        bt_allreduce(all, sums, 4, BT_F64, BT_SUM) != BT_OK ||
        bt_allreduce(all, slowest, 5, BT_F64, BT_MAX) != BT_OK)
        return fail(bt_world_error(t->world));
    res->loss = sums[1] > 0 ? sums[0] / sums[1] : 0.0;
    res->attn_bytes = sums[2];
    res->attn_pairs = sums[3];
    res->attn_s = slowest[0];
    res->exposed_s = slowest[1];
    res->reduce_s = slowest[2];
    res->gather_s = slowest[3];
    res->offload_s = slowest[4];
    return 0;
}

/* A non-finite step (what: where it was seen): skipped (0, *skipped = 1) or
 * every rank stops. Every rank calls it on the same step, having agreed. */
static int nonfinite(trainer *t, int64_t step, const char *what, int *skipped)
{
    if (t->choices.on_nonfinite == NONFINITE_SKIP) {
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

int trainer_step(trainer *t, int64_t step, trainer_step_result *res)
{
    const train_config *c = &t->cfg;
    int64_t valid = 0, counted = 0, first_bad;
    double loss_sum = 0;
    memset(res, 0, sizeof *res);
    res->grad_norm = NAN; /* until the optimizer measures it */
    t->step_now = step;
    int status = read_samples(t, step, &valid);
    res->tokens = valid;
    if (status == 0)
        status = forward_backward(t, valid > 0 ? 1.0f / (float)valid : 0.0f, &loss_sum, &counted,
                                  res);
    if (status != 0) return status;
    if ((status = agree(t, loss_sum, counted, &first_bad, res)) != 0) return status;
    char what[96];
    if (first_bad != INT64_MAX) {
        snprintf(what, sizeof what, "non-finite loss or gradient seen on rank %lld",
                 (long long)first_bad);
        return nonfinite(t, step, what, &res->skipped);
    }
    double lr = lr_schedule(c->lr, c->min_lr, c->warmup_steps, c->steps, step);
    /* t->grads NULL at zero >= 2: summed into the block already */
    void *params = t->params16 ? (void *)t->params16 : (void *)t->params;
    bt_status st = zero_step(t->opt, params, t->grads, lr, step, &res->grad_norm);
    if (st != BT_OK) return fail_with(t, "the optimizer step", st);
    /* Finite gradients everywhere can still sum to an infinite one: the norm is
     * all-reduced, so every rank sees it, and the optimizer updated nothing. */
    if (!isfinite(res->grad_norm))
        return nonfinite(t, step, "non-finite gradient norm after the reduction", &res->skipped);
    return 0;
}
