/* trainer_memory.c: a rank's memory (trainer.h): its parts counted from the
 * configuration before anything large is allocated, the check against the
 * memory it lives in, and on a device the one arena every buffer of the
 * engine and the kernels' scratch come from, sized from that count plus a
 * margin for alignment and scratch, so that no step allocates from the
 * runtime and a run that cannot fit stops at setup with exit 2. */
#include <math.h>
#include <stdio.h>

#include "kernels/arena.h"
#include "kernels/device.h"
#include "src/attn/ring_plan.h"
#include "src/train/trainer.h"
#include "transport/transport.h"
#include "util/exit_codes.h"
#include "util/parse.h"

size_t trainer_memory_total(const trainer_memory *m)
{
    const model_memory *r = &m->model;
    size_t transient = r->head_logits > m->reduce_copy ? r->head_logits : m->reduce_copy;
    return m->params + m->grads + m->optimizer + m->tokens + m->segments + m->whole_sample +
           r->stored + r->workspace + r->ring + m->nccl + transient;
}

int trainer_memory_part_list(const trainer_memory *m, trainer_memory_part *out)
{
    const model_memory *r = &m->model;
    const struct {
        trainer_memory_part part;
        int optional; /* left out when 0 */
    } parts[] = {
        {{m->zero_stage == 3 ? "parameters (gathered windows)" : "parameters", "parameters",
          m->params, 1},
         0},
        {{m->zero_stage >= 2 ? "gradients (windows)" : "gradients", "gradients", m->grads, 1}, 0},
        {{"optimizer", "optimizer", m->optimizer, 1}, 0},
        {{"stored activations", "stored_activations", r->stored, 1}, 0},
        {{"layer workspace", "layer_workspace", r->workspace, 1}, 0},
        {{"ring buffers", "ring_buffers", r->ring, 1}, 0},
        /* with their document ids and the recall source's whole sample */
        {{"tokens", "tokens", m->tokens + m->segments + m->whole_sample, 1}, 0},
        {{"NCCL's buffers (estimated)", "nccl_buffers", m->nccl, 0}, 1},
        /* the two transients, last */
        {{"head logits", "head_logits", r->head_logits, 0}, 0},
        {{"gradient reduction copy", "gradient_reduction_copy", m->reduce_copy, 0}, 0}};
    _Static_assert(sizeof parts / sizeof *parts == TRAINER_MEMORY_PARTS, "one row per part");
    int n = 0;
    for (int i = 0; i < TRAINER_MEMORY_PARTS; i++)
        if (!parts[i].optional || parts[i].part.bytes > 0) out[n++] = parts[i].part;
    return n;
}

void trainer_memory_parts(const trainer_memory *m, char *buf, size_t len)
{
    trainer_memory_part parts[TRAINER_MEMORY_PARTS];
    int n = trainer_memory_part_list(m, parts);
    size_t used = 0;
    buf[0] = '\0';
    for (int i = 0; i < n && used < len; i++) {
        char h[32];
        const char *sep = i == 0 ? "" : i == n - 2 ? "; the larger of " : i == n - 1 ? " or " : ", ";
        int w = snprintf(buf + used, len - used, "%s%s %s", sep, parts[i].name,
                         bu_human_bytes((double)parts[i].bytes, h, sizeof h));
        used += w > 0 ? (size_t)w : 0;
    }
}

size_t trainer_device_bytes(const trainer_memory *m)
{
    const model_memory *r = &m->model;
    return m->params + m->grads + m->optimizer + m->tokens + r->stored + r->workspace + r->ring;
}

static size_t align_up(size_t bytes)
{
    return (bytes + BK_ARENA_ALIGN - 1) / BK_ARENA_ALIGN * BK_ARENA_ALIGN;
}

size_t trainer_arena_bytes(const trainer_memory *m)
{
    return align_up(trainer_device_bytes(m) + m->arena_margin); /* as the arena has it */
}

/* The most scratch the device kernels hold at once in a step: RMSNorm over
 * this rank's rows, the norm of all the gradients (trainer_step's check). */
static size_t kernel_scratch_bytes(const trainer *t)
{
    return align_up(bk_device_scratch_bytes(t->layout.n, t->cfg.d_model, t->model.n_params));
}

/* What the device arena needs beyond the device parts: each buffer rounded
 * up to BK_ARENA_ALIGN (at most 64 buffers of the runner, ring, optimizer and
 * trainer plus 3 per layer stored, 13 with keep_layers: fewer are made;
 * trainer_check_scratch_room finds out at setup if that ever changes) and the
 * kernels' scratch. */
static size_t arena_margin(const trainer *t)
{
    size_t buffers = 64 + (t->cfg.keep_layers ? 13 : 3) * (size_t)t->cfg.layers;
    return buffers * BK_ARENA_ALIGN + kernel_scratch_bytes(t);
}

size_t trainer_nccl_bytes(const trainer *t, char *basis, size_t basis_len)
{
    /* the ring's channels each have a communicator; the collectives one more */
    return bt_nccl_buffer_bytes(t->choices.on_device ? t->nccl_ranks : 0, RING_N_CHANNELS, basis,
                                basis_len);
}

int trainer_zero_stage(const trainer *t)
{
    return t->opts.forward_only ? 1 : t->zero_stage;
}

size_t trainer_param_window_bytes(const trainer *t, int64_t count)
{
    return zero1_window_bytes(count, t->choices.bf16_matmul ? BK_BF16 : BK_F32);
}

zero1_sharding trainer_sharding(const trainer *t)
{
    return (zero1_sharding){trainer_zero_stage(t)};
}

int trainer_plan_memory(trainer *t, const model_runner_config *rc, char *err, size_t err_len)
{
    trainer_memory *m = &t->mem;
    if (model_runner_memory(rc, &m->model, err, err_len) != 0) return -1;
    bk_dtype param_type = t->choices.bf16_matmul ? BK_BF16 : BK_F32;
    int stage = trainer_zero_stage(t);
    /* zero >= 2: the embedding's window and the bucket (trainer_bind_gradients),
     * the same windows for the parameters at zero = 3 (make_buffers) */
    int64_t embed = model_embed_floats(&t->model), bucket = model_grad_bucket_floats(&t->model),
            windows = embed + bucket, grad_floats = stage >= 2 ? windows : t->model.n_params,
            n = t->model.n_params;
    m->zero_stage = stage;
    m->grads = (size_t)grad_floats * sizeof(float);
    /* bf16: rounded up to whole floats, as the trainer allocates them */
    m->params = stage == 3
                    ? trainer_param_window_bytes(t, embed) + trainer_param_window_bytes(t, bucket)
                : param_type == BK_BF16 ? (size_t)(n + 1) / 2 * sizeof(float)
                                        : (size_t)n * sizeof(float);
    m->optimizer =
        zero1_bytes(t->model.n_params, t->world_size, t->rank, param_type, trainer_sharding(t));
    m->reduce_copy = stage >= 2 ? zero1_range_bytes(embed > bucket ? embed : bucket, t->world_size)
                                : zero1_step_bytes(t->model.n_params, t->world_size);
    if (t->opts.forward_only) m->grads = m->optimizer = m->reduce_copy = 0;
    size_t mb = (size_t)t->cfg.micro_batches;
    m->tokens = 2 * (size_t)t->layout.n * mb * sizeof(int64_t);
    /* the recall source makes each sample whole (tokens, labels) first */
    m->whole_sample = t->choices.recall ? 2 * (size_t)t->cfg.seq_len * sizeof(int64_t) : 0;
    /* the document ids of each micro-batch's whole sequence */
    m->segments = t->choices.mask.flags & BK_ATTN_DOCUMENT
                      ? (size_t)(t->cfg.seq_len + 1) * mb * sizeof(int32_t)
                      : 0;
    if (t->choices.on_device) {
        m->arena_margin = arena_margin(t);
        m->nccl = trainer_nccl_bytes(t, NULL, 0);
    }
    return 0;
}

/* The memory a rank's state lives in, and the share of it each rank may
 * take: on a GPU its free memory over the ranks that drive it, else the
 * node's available memory over the node's ranks (also for the emulated
 * device, whose memory is the host's unless BK_EMU_DEVICE_BYTES gives it
 * some). *share < 0: unknown. */
static const char *memory_share(const trainer *t, double *share)
{
    int local = bt_world_local_size(t->world);
    local = local > 0 ? local : 1;
    size_t free_bytes, total;
    if (t->choices.on_device && bk_device_memory(&free_bytes, &total) == BK_OK) {
        int sharing = (local + t->device_count - 1) / t->device_count;
        *share = (double)free_bytes / sharing;
        return "a device has free for each of the ranks that drive it";
    }
    double avail = trainer_available_bytes();
    *share = avail > 0 ? avail / local : -1;
    return "a node has available for each of its ranks";
}

/* The need compared with the share of memory_share, agreed over the world:
 * need[0] the largest total, need[1] the largest need where the share is (on
 * a device the parts that live there; the arena adds its margin when it is
 * taken), *share the smallest share (< 0: unknown). 0, or -1 when the world
 * failed. */
static int agree_on_need(trainer *t, double need[2], double *share, const char **where)
{
    *where = memory_share(t, share);
    double total = (double)trainer_memory_total(&t->mem),
           there =
               t->choices.on_device ? (double)(trainer_device_bytes(&t->mem) + t->mem.nccl) : total;
    /* [largest total, largest need where the share is, -smallest share], reduced with MAX */
    double v[3] = {total, there, *share >= 0 ? -*share : -INFINITY};
    if (bt_allreduce(bt_world_comm(t->world), v, 3, BT_F64, BT_MAX) != BT_OK) return -1;
    need[0] = v[0], need[1] = v[1], *share = -v[2];
    return 0;
}

static int over_limit(const trainer *t, const double need[2])
{
    return t->cfg.limit_bytes > 0 && need[0] > (double)t->cfg.limit_bytes;
}

int trainer_memory_fits(trainer *t)
{
    double need[2], share;
    const char *where;
    if (agree_on_need(t, need, &share, &where) != 0) return -1;
    return !over_limit(t, need) && need[1] <= share;
}

int trainer_check_memory(trainer *t, char *err, size_t err_len)
{
    const train_config *c = &t->cfg;
    double need2[2], share;
    const char *where;
    if (agree_on_need(t, need2, &share, &where) != 0) {
        snprintf(err, err_len, "%s", bt_world_error(t->world));
        return EXIT_RUN_FAILURE;
    }
    int over = over_limit(t, need2);
    if (!over && need2[1] <= share) return 0;
    double need = over ? need2[0] : need2[1];
    const char *kind = !over && t->choices.on_device ? " of device memory" : "";
    char parts[512], h_need[32], h_have[32], have[160];
    trainer_memory_parts(&t->mem, parts, sizeof parts);
    if (over)
        snprintf(have, sizeof have, "more than [memory] limit_bytes = %lld (%s)",
                 (long long)c->limit_bytes, bu_human_bytes((double)c->limit_bytes, h_have, 32));
    else
        snprintf(have, sizeof have, "more than %s (%s)", where,
                 bu_human_bytes(share, h_have, sizeof h_have));
    snprintf(err, err_len, "a rank needs %.0f bytes%s (%s) at ZeRO stage %d, %s: %s", need, kind,
             bu_human_bytes(need, h_need, sizeof h_need), trainer_zero_stage(t), have, parts);
    return trainer_fail_together(t, t->rank == 0, 0, err, err_len);
}

/* The message of an arena the device did not give: its size, the device's
 * free memory (when it says) and the parts of the estimate. */
static void arena_refused(const trainer *t, size_t bytes, char *err, size_t err_len)
{
    char parts[512], h[3][32], free_text[96] = "the device does not report its free memory";
    size_t free_bytes, total;
    trainer_memory_parts(&t->mem, parts, sizeof parts);
    if (bk_device_memory(&free_bytes, &total) == BK_OK)
        snprintf(free_text, sizeof free_text, "the device has %zu bytes (%s) free", free_bytes,
                 bu_human_bytes((double)free_bytes, h[1], 32));
    snprintf(err, err_len,
             "out of device memory: cannot take the device arena of %zu bytes (%s), %s; the "
             "estimate: %s; and %s for alignment and kernel scratch",
             bytes, bu_human_bytes((double)bytes, h[0], 32), free_text, parts,
             bu_human_bytes((double)t->mem.arena_margin, h[2], 32));
}

int trainer_make_arena(trainer *t, char *err, size_t err_len)
{
    if (!t->choices.on_device) return 0;
    size_t bytes = trainer_arena_bytes(&t->mem);
    int failed = bk_arena_create(bytes, BK_ARENA_DEVICE, &t->arena) != BK_OK;
    if (failed) arena_refused(t, bytes, err, err_len);
    int status = trainer_agree_on_own_part(t, failed, err, err_len);
    if (status == 0) t->queue.arena = t->arena;
    return status;
}

int trainer_check_scratch_room(const trainer *t, char *err, size_t err_len)
{
    if (!t->arena) return 0;
    bk_arena_stats s = bk_arena_stats_of(t->arena);
    size_t need = kernel_scratch_bytes(t);
    if (s.largest_free >= need) return 0;
    snprintf(err, err_len,
             "the device arena of %zu bytes has %zu bytes left in one piece after setup; the "
             "kernels' scratch needs %zu",
             s.capacity, s.largest_free, need);
    return -1;
}
