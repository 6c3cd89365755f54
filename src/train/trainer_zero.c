/* trainer_zero.c: what the trainer chooses of ZeRO (trainer_internal.h): the
 * stage a run uses, what the optimizer shards, the parameters the model reads
 * when they are whole, and the testing aids' fault. The windows, the hooks
 * between the model and the optimizer and their exposed times are ZeRO's own
 * (src/train/zero.h). */
#include <float.h>
#include <math.h>
#include <stdint.h>

#include "src/train/trainer_internal.h"

int trainer_zero_stage(const trainer *t)
{
    return t->opts.forward_only ? 1 : t->zero_stage;
}

zero_sharding trainer_sharding(const trainer *t)
{
    return zero_sharding_for(&t->model, trainer_zero_stage(t),
                             t->choices.on_device && train_config_optimizer_on_host(&t->cfg));
}

model_params trainer_params(const trainer *t)
{
    return (model_params){t->params, t->params16}; /* both NULL at zero = 3: gathered */
}

float trainer_injected_fault(const trainer *t)
{
    if (t->opts.inject_step == t->step_now && t->opts.inject_rank == t->rank) return NAN;
    return t->opts.overflow_step == t->step_now ? FLT_MAX : 0.0f;
}
