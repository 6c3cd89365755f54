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
#include "src/train/trainer_internal.h"
#include "transport/transport.h"
#include "util/exit_codes.h"
#include "util/parse.h"
#include "util/proc_memory.h"

/* The larger of the two transients, which live at different times of a step. */
static size_t transient_bytes(const trainer_memory *m)
{
    return m->model.head_logits > m->reduce_copy ? m->model.head_logits : m->reduce_copy;
}

size_t trainer_memory_total(const trainer_memory *m)
{
    const model_memory *r = &m->model;
    size_t transient = transient_bytes(m);
    return m->params + m->grads + m->optimizer + m->optimizer_host + m->tokens + m->segments +
           m->whole_sample + r->stored + r->offloaded + r->workspace + r->ring + r->sdpa +
           m->nccl + transient;
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
        /* [memory] optimizer = host: the state and the CPU's update, in host memory */
        {{"optimizer (host)", "optimizer_host", m->optimizer_host, 0}, 1},
        {{"stored activations", "stored_activations", r->stored, 1}, 0},
        /* page-locked host memory, taken whole: the arena does not hold it */
        {{"offloaded activations (host)", "offloaded_activations", r->offloaded, 0}, 1},
        {{"layer workspace", "layer_workspace", r->workspace, 1}, 0},
        {{"ring buffers", "ring_buffers", r->ring, 1}, 0},
        /* [attention] kernel = cudnn: block outputs, Stats, gradients, workspace */
        {{"attention calls (cuDNN)", "attention_calls", r->sdpa, 1}, 1},
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
    return m->params + m->grads + m->optimizer + m->tokens + r->stored + r->workspace + r->ring +
           r->sdpa;
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

int trainer_plan_memory(trainer *t, const model_runner_config *rc, char *err, size_t err_len)
{
    trainer_memory *m = &t->mem;
    if (model_runner_memory(rc, &m->model, err, err_len) != 0) return -1;
    bk_dtype param_type = t->choices.bf16_matmul ? BK_BF16 : BK_F32;
    zero_sharding sharding = trainer_sharding(t);
    m->zero_stage = sharding.stage;
    /* the whole buffers, or ZeRO's windows (the embedding's and two buckets):
     * the gradients' at zero >= 2, the parameters' at zero = 3 */
    zero_model_bytes(&t->model, param_type, sharding.stage, &m->params, &m->grads);
    m->optimizer = zero_bytes(t->model.n_params, t->world_size, t->rank, param_type, sharding);
    m->optimizer_host =
        zero_host_bytes(t->model.n_params, t->world_size, t->rank, param_type, sharding);
    m->reduce_copy = zero_step_bytes(t->model.n_params, t->world_size, sharding);
    if (t->opts.forward_only) m->grads = m->optimizer = m->optimizer_host = m->reduce_copy = 0;
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

size_t trainer_host_bytes(const trainer_memory *m, int on_device)
{
    size_t total = trainer_memory_total(m);
    return on_device ? total - trainer_device_bytes(m) - m->nccl - transient_bytes(m) : total;
}

void trainer_memory_needs(const trainer_memory *m, int on_device, double need[MEMORY_KINDS])
{
    need[MEMORY_TOTAL] = (double)trainer_memory_total(m);
    need[MEMORY_DEVICE] = on_device ? (double)(trainer_device_bytes(m) + m->nccl) : 0;
    need[MEMORY_HOST] = (double)trainer_host_bytes(m, on_device);
}

int trainer_memory_verdict(const double need[MEMORY_KINDS], const double room[MEMORY_KINDS])
{
    for (int k = 0; k < MEMORY_KINDS; k++)
        if (room[k] >= 0 && need[k] > room[k]) return k;
    return -1;
}

/* The room of each kind a rank of t may take: [memory] limit_bytes for the
 * total (-1: none); on a device a GPU's free memory over the ranks that drive
 * it (the emulated device's is the host's unless BK_EMU_DEVICE_BYTES gives it
 * some); the node's available memory over its ranks for the host part, on a
 * device as on the CPU; -1 where unknown. */
static void memory_room(const trainer *t, double room[MEMORY_KINDS])
{
    int local = bt_world_local_size(t->world);
    local = local > 0 ? local : 1;
    size_t free_bytes, total;
    room[MEMORY_TOTAL] = t->cfg.limit_bytes > 0 ? (double)t->cfg.limit_bytes : -1;
    room[MEMORY_DEVICE] = -1;
    if (t->choices.on_device && bk_device_memory(&free_bytes, &total) == BK_OK)
        room[MEMORY_DEVICE] =
            (double)free_bytes / ((local + t->device_count - 1) / t->device_count);
    double avail = bu_available_bytes();
    room[MEMORY_HOST] = avail > 0 ? avail / local : -1;
}

/* need and room agreed over the world: every rank's largest need of each kind
 * against the smallest room. 0, or -1 when the world failed. */
static int agree_on_need(trainer *t, double need[MEMORY_KINDS], double room[MEMORY_KINDS])
{
    trainer_memory_needs(&t->mem, t->choices.on_device, need);
    memory_room(t, room);
    /* largest needs and -smallest rooms (unknown: -inf), reduced with MAX */
    double v[2 * MEMORY_KINDS];
    for (int k = 0; k < MEMORY_KINDS; k++)
        v[k] = need[k], v[MEMORY_KINDS + k] = room[k] >= 0 ? -room[k] : -INFINITY;
    if (bt_allreduce(bt_world_comm(t->world), v, 2 * MEMORY_KINDS, BT_F64, BT_MAX) != BT_OK)
        return -1;
    for (int k = 0; k < MEMORY_KINDS; k++)
        need[k] = v[k], room[k] = isinf(v[MEMORY_KINDS + k]) ? -1 : -v[MEMORY_KINDS + k];
    return 0;
}

int trainer_memory_fits(trainer *t)
{
    double need[MEMORY_KINDS], room[MEMORY_KINDS];
    if (agree_on_need(t, need, room) != 0) return -1;
    if (t->choices.on_device) /* the arena: the parts and their margin (this rank's) */
        need[MEMORY_DEVICE] +=
            (double)trainer_arena_bytes(&t->mem) - (double)trainer_device_bytes(&t->mem);
    return trainer_memory_verdict(need, room) < 0;
}

int trainer_check_memory(trainer *t, char *err, size_t err_len)
{
    static const char *const kinds[MEMORY_KINDS] = {"", " of device memory", " of host memory"};
    static const char *const rooms[MEMORY_KINDS] = {
        "[memory] limit_bytes", "a device has free for each of the ranks that drive it",
        "a node has available for each of its ranks"};
    double need[MEMORY_KINDS], room[MEMORY_KINDS];
    if (agree_on_need(t, need, room) != 0) {
        snprintf(err, err_len, "%s", bt_world_error(t->world));
        return EXIT_RUN_FAILURE;
    }
    int k = trainer_memory_verdict(need, room);
    if (k < 0) return 0;
    char parts[512], h_need[32], h_room[32];
    trainer_memory_parts(&t->mem, parts, sizeof parts);
    const char *eq = k == MEMORY_TOTAL ? " = " : "";
    char limit[32] = "";
    if (k == MEMORY_TOTAL) snprintf(limit, sizeof limit, "%lld", (long long)t->cfg.limit_bytes);
    snprintf(err, err_len,
             "a rank needs %.0f bytes%s (%s) at ZeRO stage %d, more than %s%s%s (%s): %s", need[k],
             kinds[k], bu_human_bytes(need[k], h_need, sizeof h_need), trainer_zero_stage(t),
             rooms[k], eq, limit, bu_human_bytes(room[k], h_room, sizeof h_room), parts);
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
