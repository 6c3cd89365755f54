/* worker_model.h: the small model the device workers of tests/train run
 * (model_device_worker, model_fail_worker), one definition so that both
 * test the same shapes: 32 wide, two query heads sharing one key/value head
 * of 16 (grouped-query attention), a feed-forward of 48, a vocabulary of 23,
 * untied, default RoPE; the layers each worker's own. */
#ifndef BURST_TESTS_WORKER_MODEL_H
#define BURST_TESTS_WORKER_MODEL_H

#include "src/train/model.h"

static inline model_dims test_worker_model_dims(int layers)
{
    return (model_dims){.layers = layers,
                        .d_model = 32,
                        .n_heads = 2,
                        .n_kv_heads = 1,
                        .head_dim = 16,
                        .d_ff = 48,
                        .vocab = 23,
                        .tied = 0,
                        .rope = {.type = BK_ROPE_DEFAULT, .theta = 10000, .factor = 1},
                        .norm_eps = 1e-5f};
}

#endif
