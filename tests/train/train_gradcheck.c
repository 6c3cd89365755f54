/* train_gradcheck.c: the tiny model's gradients against central finite
 * differences of its loss, for entries of every parameter tensor, on one rank
 * or on a context-parallel group under `burst run` (the ring included). The
 * model runs in fp32, so the differences use a step large enough for fp32 and
 * a tolerance that says so. Prints "ok gradcheck" on rank 0, exits 1 on a
 * mismatch. Usage: train_gradcheck CKPT_FRACTION FUSED(0|1) */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "src/train/model.h"
#include "tests/lib/worker_util.h"

static double loss_of(model_runner *r, const float *params, float *grads, int64_t n_params,
                      const int64_t *tokens, const int64_t *labels, int64_t n_valid_total)
{
    memset(grads, 0, (size_t)n_params * sizeof(float));
    double sums[2] = {0, 0};
    int64_t valid = 0;
    model_step_stats st = {0};
    must(model_forward_backward(r, 0, params, grads, tokens, labels, 1.0f / (float)n_valid_total,
                                &sums[0], &valid, &st),
         "forward/backward");
    bt_allreduce(bt_world_comm(world), sums, 1, BT_F64, BT_SUM);
    return sums[0] / (double)n_valid_total;
}

int main(int argc, char **argv)
{
    double fraction = argc > 1 ? atof(argv[1]) : 1.0;
    int fused = argc > 2 ? atoi(argv[2]) : 1;
    char err[512];
    worker_init("train_gradcheck");
    int P = size;
    model_dims dims = {.layers = 2, .d_model = 16, .n_heads = 2, .n_kv_heads = 1, .head_dim = 8,
                       .d_ff = 24, .vocab = 19, .tied = 0, .rope_theta = 10000,
                       .rope_scaling = 1, .norm_eps = 1e-5f};
    model_layout m;
    model_layout_init(&m, &dims);
    int64_t N = 16 * P;
    seq_layout layout;
    seq_layout_init(&layout, LAYOUT_ZIGZAG, P, N, err, sizeof err);
    bk_queue q = bk_host_queue();
    model_runner_config rc = {.model = &m, .cp = bt_world_comm(world), .layout = layout,
                              .topo = TOPO_FLAT, .nodes = 1, .mask = bk_attn_mask_causal(),
                              .backward = BWD_AUTO, .keep = plan_keep(fraction), .micro_batches = 1,
                              .fused_head = fused,
                              .head = {.chunk_tokens = 5, .z_loss = 1e-3f, .ignore_index = -100},
                              .queue = &q};
    model_runner *r = model_runner_create(&rc, err, sizeof err);
    if (!r) {
        fprintf(stderr, "%s\n", err);
        return WORKER_FAILED;
    }
    float *params = malloc((size_t)m.n_params * sizeof(float)),
          *grads = malloc((size_t)m.n_params * sizeof(float)),
          *scratch = malloc((size_t)m.n_params * sizeof(float));
    model_init_params(&m, params, 7, 0.3); /* large weights: gradients well above fp32 noise */
    /* the global sequence, then this rank's share; every third label ignored */
    int64_t *all = malloc((size_t)(N + 1) * sizeof(int64_t)), n = layout.n;
    for (int64_t i = 0; i <= N; i++) all[i] = (i * 7 + 3) % dims.vocab;
    int64_t *pos = malloc((size_t)n * sizeof(int64_t)), *tokens = malloc((size_t)n * sizeof(int64_t)),
            *labels = malloc((size_t)n * sizeof(int64_t)), valid_total = 0;
    for (int64_t p = 0; p < N; p++) valid_total += p % 3 != 2;
    seq_layout_positions(&layout, rank, pos);
    for (int64_t i = 0; i < n; i++) {
        tokens[i] = all[pos[i]];
        labels[i] = pos[i] % 3 == 2 ? -100 : all[pos[i] + 1];
    }
    loss_of(r, params, grads, m.n_params, tokens, labels, valid_total);
    /* the analytic gradient is a sum over ranks */
    bt_allreduce(bt_world_comm(world), grads, (size_t)m.n_params, BT_F32, BT_SUM);

    struct {
        const char *name;
        int64_t offset, count;
    } tensors[] = {{"embedding", m.embed, (int64_t)dims.vocab * dims.d_model},
                   {"layer0.attn_norm", m.layer[0].attn_norm, dims.d_model},
                   {"layer0.wq", m.layer[0].wq, 16 * 16},
                   {"layer0.wk", m.layer[0].wk, 16 * 8},
                   {"layer0.wv", m.layer[0].wv, 16 * 8},
                   {"layer1.wo", m.layer[1].wo, 16 * 16},
                   {"layer1.mlp_norm", m.layer[1].mlp_norm, 16},
                   {"layer1.w_gate_up", m.layer[1].w_gate_up, 16 * 48},
                   {"layer1.w_down", m.layer[1].w_down, 24 * 16},
                   {"final_norm", m.final_norm, 16},
                   {"head", m.head, (int64_t)dims.vocab * dims.d_model}};
    int checked = 0;
    const double h = 1e-2;
    for (size_t t = 0; t < sizeof tensors / sizeof *tensors; t++)
        for (int k = 0; k < 4; k++) {
            int64_t i = tensors[t].offset + (int64_t)((k * 2654435761u) % (uint64_t)tensors[t].count);
            float saved = params[i];
            params[i] = saved + (float)h;
            double up = loss_of(r, params, scratch, m.n_params, tokens, labels, valid_total);
            params[i] = saved - (float)h;
            double down = loss_of(r, params, scratch, m.n_params, tokens, labels, valid_total);
            params[i] = saved;
            double fd = (up - down) / (2 * h), g = grads[i];
            double tol = 2e-3 + 3e-2 * fabs(fd);
            checked++;
            if (!(fabs(fd - g) <= tol)) {
                if (rank == 0)
                    fprintf(stderr, "%s[%lld]: gradient %.6g, finite difference %.6g\n",
                            tensors[t].name, (long long)(i - tensors[t].offset), g, fd);
                failures++;
            }
        }
    model_runner_free(r);
    model_layout_free(&m);
    int64_t total_failures = worker_finish();
    if (rank == 0 && !total_failures)
        printf("ok gradcheck: %d entries of %zu tensors, fraction %g, %s head, %d ranks\n", checked,
               sizeof tensors / sizeof *tensors, fraction, fused ? "fused" : "unfused", P);
    free(params), free(grads), free(scratch), free(all), free(pos), free(tokens), free(labels);
    return total_failures ? WORKER_FAILED : 0;
}
