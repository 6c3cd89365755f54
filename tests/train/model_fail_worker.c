/* model_fail_worker.c: a kernel that fails on the device during a step is
 * reported as a device error, with the device's message, and one that refuses
 * its arguments as a refused call, whether the model (src/train/model_pass.c) or
 * the ring (src/attn/ring_forward.c) called it. One rank under `burst run`
 * (tests/train/test_model_device).
 *
 * The program's device backend is the emulator's with a switch: while
 * `inject` names an op, that op fails as a CUDA kernel would (through
 * bk_device_failed, with an "injected" message) or refuses its arguments.
 * One forward + backward of the model runner on the device per case; the
 * status it returns and the message the trainer would print
 * (attn_kernel_failure) are checked. With BK_EMU_DEVICE_BYTES set, an
 * allocation past it fails as cudaMalloc's does and bk_kernel_error names
 * the call. Prints "ok device failures" and exits 0 when every case holds. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/device_ops.h"
#include "src/attn/device_link.h"
#include "src/attn/kernel_status.h"
#include "src/train/data/token_source.h"
#include "src/train/model.h"
#include "tests/lib/worker_device.h"
#include "tests/lib/worker_model.h"

/* ---------------------------------------------------------------- the failing backend */
typedef enum { INJECT_NONE, INJECT_RMSNORM, INJECT_ATTENTION } inject_op;
static inject_op inject;
static bk_status inject_status; /* BK_ERR_DEVICE or BK_ERR_ARG */

static bk_status injected(void)
{
    return inject_status == BK_ERR_DEVICE
               ? bk_device_failed("kernel launch", "injected failure (model_fail_worker)")
               : inject_status;
}

static bk_status rmsnorm_fwd(const bk_queue *q, int64_t n, int64_t d, const float *x,
                             const float *w, float eps, float *y, float *rstd)
{
    if (inject == INJECT_RMSNORM) return injected();
    return bk_emu_ops.rmsnorm_fwd(q, n, d, x, w, eps, y, rstd);
}

static bk_status attn_fwd(const bk_queue *q, const bk_attn_geom *g, const void *Q, const void *K,
                          const void *V, bk_dtype in_type, float *O, float *lse,
                          bk_attn_stats *stats)
{
    if (inject == INJECT_ATTENTION) return injected();
    return bk_emu_ops.attn_fwd(q, g, Q, K, V, in_type, O, lse, stats);
}

const bk_device_ops *bk_device_backend(void)
{
    static bk_device_ops ops;
    if (ops.name == NULL) {
        ops = bk_emu_ops;
        ops.rmsnorm_fwd = rmsnorm_fwd;
        ops.attn_fwd = attn_fwd;
    }
    return &ops;
}

/* ---------------------------------------------------------------- the cases */
typedef struct {
    model_runner *r;
    model_params params;
    float *grads;
    const int64_t *tokens, *labels;
} step_args;

static bt_status step(const step_args *a)
{
    model_step_stats stats = {0};
    return model_forward_backward(a->r, 0, a->params, &(model_grads){.whole = a->grads}, a->tokens,
                                  a->labels, 0.01f, &(double){0}, &(int64_t){0}, &stats);
}

/* With op failing with fails_with, a step returns want and the message names
 * what it should ("device" with the injected message, or "refused"). */
static void expect(const step_args *a, const char *name, inject_op op, bk_status fails_with,
                   bt_status want, const char *message)
{
    inject = op, inject_status = fails_with;
    bt_status st = step(a);
    inject = INJECT_NONE;
    char msg[320];
    attn_kernel_failure(st, msg, sizeof msg);
    printf("%s: %s (%s)\n", name, msg, bt_status_name(st));
    if (st != want || strstr(msg, message) == NULL) {
        fprintf(stderr, "%s: returned %s, \"%s\"; expected %s, \"...%s...\"\n", name,
                bt_status_name(st), msg, bt_status_name(want), message);
        failures++;
    }
}

int main(void)
{
    char err[512];
    worker_init("model_fail_worker");
    if (!bk_device_available() || transport_link_device(world, -1) != BT_OK)
        worker_exit(BT_ERR_CONFIG, "no device, or the transport refused it");
    /* the mapping itself: only a refused call is an argument error */
    const bk_status all[] = {BK_OK, BK_ERR_ARG, BK_ERR_UNSUPPORTED, BK_ERR_DEVICE, BK_ERR_NOMEM};
    const bt_status want[] = {BT_OK, BT_ERR_ARG, BT_ERR_SYS, BT_ERR_SYS, BT_ERR_SYS};
    for (int i = 0; i < 5; i++)
        if (attn_kernel_status(all[i]) != want[i]) {
            fprintf(stderr, "attn_kernel_status(%s) = %s\n", bk_status_name(all[i]),
                    bt_status_name(attn_kernel_status(all[i])));
            failures++;
        }

    model_dims dims = test_worker_model_dims(1);
    model_layout m;
    if (model_layout_init(&m, &dims) != 0) worker_exit(BT_ERR_SYS, "out of memory");
    seq_layout layout;
    if (seq_layout_init(&layout, choose_layout(LAYOUT_CHOICE_AUTO, MASK_CHOICE_CAUSAL), size, 32 * (int64_t)size, err,
                        sizeof err) != 0)
        worker_exit(BT_ERR_CONFIG, err);
    bk_queue dq = {BK_DEVICE, NULL, 0, NULL};
    model_runner_config rc = {.model = &m,
                              .cp = bt_world_comm(world),
                              .layout = layout,
                              .topo = TOPO_FLAT,
                              .nodes = 1,
                              .mask = choose_mask(MASK_CHOICE_CAUSAL, 0),
                              .backward = BWD_AUTO,
                              .keep = choose_keep(1.0),
                              .micro_batches = 1,
                              .fused_head = 1,
                              .head = {.chunk_tokens = 7, .ignore_index = TOKEN_IGNORE},
                              .queue = &dq};
    model_runner *r = model_runner_create(&rc, err, sizeof err);
    if (!r) worker_exit(BT_ERR_SYS, err);

    size_t np = (size_t)m.n_params, n = (size_t)layout.n;
    float *params = malloc(np * sizeof(float)), *grads = calloc(np, sizeof(float));
    int64_t *tokens = malloc(n * sizeof(int64_t));
    if (!params || !grads || !tokens) worker_exit(BT_ERR_SYS, "out of memory");
    model_init_params(&m, params, 11, 0.2);
    for (size_t i = 0; i < n; i++) tokens[i] = (int64_t)(i * 5 + 2) % dims.vocab;
    step_args a = {r, {worker_device_copy(params, np * sizeof(float)), NULL},
                   worker_device_copy(grads, np * sizeof(float)),
                   worker_device_copy(tokens, n * sizeof(int64_t)), NULL};
    a.labels = a.tokens;

    must(step(&a), "a step with nothing injected");
    expect(&a, "the model's norm fails on the device", INJECT_RMSNORM, BK_ERR_DEVICE, BT_ERR_SYS,
           "a kernel failed: device error: kernel launch: injected failure");
    expect(&a, "the ring's attention fails on the device", INJECT_ATTENTION, BK_ERR_DEVICE,
           BT_ERR_SYS, "a kernel failed: device error: kernel launch: injected failure");
    expect(&a, "the model's norm refuses its arguments", INJECT_RMSNORM, BK_ERR_ARG, BT_ERR_ARG,
           "a kernel refused its arguments");
    expect(&a, "the ring's attention refuses its arguments", INJECT_ATTENTION, BK_ERR_ARG,
           BT_ERR_ARG, "a kernel refused its arguments");
    must(step(&a), "a step after the failures");
    if (getenv("BK_EMU_DEVICE_BYTES")) { /* the emulator's own failure, named */
        void *too_much = NULL;
        bk_status st = bk_device_malloc((size_t)1 << 40, &too_much);
        printf("an allocation past the device: %s\n", bk_kernel_error());
        const char *want_msg = "device error: cudaMalloc: out of memory";
        if (st != BK_ERR_DEVICE || strncmp(bk_kernel_error(), want_msg, strlen(want_msg)) != 0) {
            fprintf(stderr, "an allocation past the emulated device: %s, \"%s\"\n",
                    bk_status_name(st), bk_kernel_error());
            failures++;
        }
    }

    model_runner_free(r);
    bk_device_free((void *)a.params.f32), bk_device_free(a.grads), bk_device_free((void *)a.tokens);
    model_layout_free(&m);
    free(params), free(grads), free(tokens);
    int64_t total_failures = worker_finish();
    if (rank == 0 && !total_failures) printf("ok device failures\n");
    return total_failures ? WORKER_FAILED : 0;
}
