/* trainer_zero.c: the trainer's side of ZeRO (trainer_internal.h): the stage
 * a run uses, the lengths of its windows, what the optimizer shards, the
 * parameters the model reads, and the hooks through which the model hands
 * each finished range of gradients to the optimizer (zero >= 2) and has each
 * range of parameters gathered into its window (zero = 3), the host's time in
 * them counted as ZeRO's exposed time. */
#include <float.h>
#include <math.h>
#include <stdint.h>

#include "src/attn/kernel_status.h"
#include "src/train/trainer_internal.h"
#include "util/clock.h"

int trainer_zero_stage(const trainer *t)
{
    return t->opts.forward_only ? 1 : t->zero_stage;
}

size_t trainer_param_window_bytes(const trainer *t, int64_t count)
{
    return zero1_window_bytes(count, t->choices.bf16_matmul ? BK_BF16 : BK_F32);
}

void trainer_window_floats(const trainer *t, int64_t floats[3])
{
    floats[0] = model_embed_floats(&t->model);
    for (int k = 0; k < 2; k++) floats[1 + k] = model_bucket_floats(&t->model, k);
}

/* ZeRO's longest range (zero >= 2): its longest window. */
static int64_t longest_range(const trainer *t)
{
    int64_t floats[3], most = 0;
    trainer_window_floats(t, floats);
    for (int i = 0; i < 3; i++)
        if (floats[i] > most) most = floats[i];
    return most;
}

zero1_sharding trainer_sharding(const trainer *t)
{
    return (zero1_sharding){.stage = trainer_zero_stage(t),
                            .state_on_host =
                                t->choices.on_device && train_config_optimizer_on_host(&t->cfg),
                            .range_floats = longest_range(t)};
}

model_params trainer_params(const trainer *t)
{
    return (model_params){t->params, t->params16}; /* both NULL at zero = 3: gathered */
}

/* zero = 3: a range of the parameters into its window, from every rank's
 * masters (the runner's model_gather); the host's time in both halves is
 * the gathers' exposed time. */
static bt_status gather_start(void *ctx, void *window, int64_t begin, int64_t end)
{
    trainer *t = ctx;
    double start = bu_now();
    bt_status st = zero1_gather_start(t->opt, window, begin, end);
    t->gather_s += bu_now() - start;
    return st;
}

static bt_status gather_wait(void *ctx)
{
    trainer *t = ctx;
    double start = bu_now();
    bt_status st = zero1_gather_arrived(t->opt);
    t->gather_s += bu_now() - start;
    return st;
}

float trainer_injected_fault(const trainer *t)
{
    if (t->opts.inject_step == t->step_now && t->opts.inject_rank == t->rank) return NAN;
    return t->opts.overflow_step == t->step_now ? FLT_MAX : 0.0f;
}

/* ZeRO-2: the micro-batch's gradients of [begin, end) are whole in grad. The
 * testing aids' fault goes into the first parameter's at the last
 * micro-batch, as it would into the whole buffer; the squares join this
 * rank's finiteness check (before the reduction, as with zero = 1); the
 * optimizer sums the range over the ranks into its block. */
static bt_status range_done(void *ctx, float *grad, int64_t begin, int64_t end)
{
    trainer *t = ctx;
    /* the last range's part, on the host, before the norm below waits for the queue */
    double start = bu_now();
    bt_status st = zero1_add_arrived(t->opt);
    t->reduce_s += bu_now() - start;
    if (st != BT_OK) return st;
    float fault = trainer_injected_fault(t);
    bk_status kst = BK_OK;
    if (begin == 0 && end > 0 && fault != 0.0f && t->mb_now == t->cfg.micro_batches - 1)
        kst = bk_fill(&t->queue, 1, grad, fault);
    const float *bufs[1] = {grad};
    int64_t count = end - begin;
    double sq = 0;
    if (kst == BK_OK) kst = bk_grad_sqnorm(&t->queue, 1, bufs, &count, &sq);
    if (kst != BK_OK) return attn_kernel_status(kst);
    t->grad_sq += sq;
    start = bu_now();
    st = zero1_add_range(t->opt, grad, begin, end);
    t->reduce_s += bu_now() - start;
    return st;
}

void trainer_bind_gradients(trainer *t)
{
    if (!t->grads)
        t->grad_sink = (model_grads){NULL, NULL, {NULL, NULL}, NULL, NULL};
    else if (trainer_zero_stage(t) >= 2)
        t->grad_sink =
            (model_grads){NULL, t->grads, {t->grad_buckets[0], t->grad_buckets[1]}, range_done, t};
    else
        t->grad_sink = (model_grads){t->grads, NULL, {NULL, NULL}, NULL, NULL};
}

void trainer_bind_gather(trainer *t)
{
    void **w = t->param_windows;
    t->param_gather = (model_gather){w[0], {w[1], w[2]}, gather_start, gather_wait, t};
    model_runner_gather(t->runner, &t->param_gather);
}
