/* trainer.c: setting a rank up, the training loop and the teardown; see
 * trainer.h. Setup refuses everything it can before allocating: a bad
 * configuration, a run that does not fit in memory (trainer_memory.c: every
 * part the memory report names, against [memory] limit_bytes and the node's
 * available memory, or on a device the parts that live there against the
 * GPU's free memory). On a device it then takes the one arena every buffer
 * of the engine and the kernels' scratch come from, so that no step
 * allocates from the runtime. Then each rank makes its own part (data
 * source, model runner, buffers; every allocation checked) and the ranks
 * agree after each part, so that a failure on any rank ends every rank with
 * exit 2. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/arena.h"
#include "kernels/bf16.h"
#include "kernels/device.h"
#include "src/attn/device_link.h"
#include "src/train/init_source.h"
#include "src/train/trainer_internal.h"
#include "util/alloc.h"
#include "util/clock.h"
#include "util/exit_codes.h"
#include "util/fail.h"
#include "util/parse.h"
#include "util/proc_memory.h"

static int make_model_layout(trainer *t, char *err, size_t err_len)
{
    const train_config *c = &t->cfg;
    model_dims dims = model_dims_of(c);
    if (model_layout_init(&t->model, &dims) == 0) return 0;
    bu_no_memory(err, err_len, (size_t)c->layers * sizeof(layer_offsets), "the model's layer table");
    return -1;
}

static int make_choices(trainer *t, char *err, size_t err_len)
{
    const train_config *c = &t->cfg;
    train_choices *p = &t->choices;
    p->layout = choose_layout(c->layout, c->mask);
    p->mask = choose_mask(c->mask, c->window);
    if ((p->mask.flags & BK_ATTN_BLOCK_SPARSE) &&
        choose_sparse_mask(c->sparse_pattern, c->sparse_block, c->seq_len, &p->mask,
                           &t->sparse_bits, err, err_len) != 0)
        return -1;
    p->backward = c->backward;
    p->ring = c->ring;
    p->source = c->source;
    p->shuffled = c->sampling == SAMPLING_SHUFFLED;
    p->recall = choose_recall(c->source, c->task);
    p->on_nonfinite = c->on_nonfinite;
    p->keep = choose_keep(c->attn_kept_fraction);
    p->on_device = c->device == TRAIN_DEVICE_CUDA;
    p->bf16_matmul = choose_bf16_matmul(c->device, c->matmul);
    p->ring_bf16 = choose_ring_bf16(p->on_device);
    return 0;
}

/* [parallel] ulysses on a world of `nodes` nodes of local_size ranks, and
 * with the attention kernel: before any collective, so that every rank stops
 * alike. 0, or -1 with err. */
static int ulysses_fits_nodes(const train_config *c, int nodes, int local_size, char *err,
                              size_t err_len)
{
    int U = c->ulysses;
    if (U > 1 && nodes > 1 && local_size % U != 0)
        return bu_fail(err, err_len,
                       "[parallel] ulysses = %d does not divide the %d ranks of a node: a "
                       "group's all-to-all stays inside a node",
                       U, local_size);
    if (U > 1 && c->kernel == ATTN_KERNEL_CUDNN)
        return bu_fail(err, err_len,
                       "[attention] kernel = cudnn cannot be had: [parallel] ulysses = %d (SDPA "
                       "calls are mapped on the ring alone)",
                       U);
    return 0;
}

/* The model runner's configuration: this rank's CP group, the planned ring
 * over a world of `nodes` nodes of `local_size` ranks. */
static int runner_config(trainer *t, int nodes, int local_size, model_runner_config *rc,
                         char *err, size_t err_len)
{
    const train_config *c = &t->cfg;
    ring_topology topo;
    int cp_nodes, U = c->ulysses;
    if (ulysses_fits_nodes(c, nodes, local_size, err, err_len) != 0) return -1;
    /* the ring runs over the groups: cp / U of them, local_size / U a node */
    if (choose_topology(t->choices.ring, c->cp / U, nodes, local_size / U, &topo, &cp_nodes) != 0) {
        snprintf(err, err_len, "[parallel] ring = double, but the CP group of %d ranks does not span "
                               "several nodes with the same number of ranks each", c->cp);
        return -1;
    }
    *rc = (model_runner_config){.model = &t->model,
                                .cp = t->cp_comm,
                                .ulysses_group = t->ulysses_group,
                                .ulysses_ring = t->ulysses_ring,
                                .layout = t->layout,
                                .topo = topo,
                                .nodes = cp_nodes,
                                .mask = t->choices.mask,
                                .backward = t->choices.backward,
                                .piece_rows = c->piece_rows,
                                .chunk_rows = c->chunk_rows,
                                .keep = t->choices.keep,
                                .keep_layers = c->keep_layers,
                                .offload_activations = c->offload_activations,
                                .micro_batches = c->micro_batches,
                                .fused_head = c->fused_head,
                                .bf16_matmul = t->choices.bf16_matmul,
                                .ring_bf16 = t->choices.ring_bf16,
                                .head = {.chunk_tokens = c->head_chunk,
                                         .z_loss = (float)c->z_loss,
                                         .ignore_index = TOKEN_IGNORE},
                                .queue = &t->queue};
    ring_sdpa_config sc = {.layout = t->layout,
                           .need = {.mask = t->choices.mask, .N = t->layout.N},
                           .h_q = c->n_heads,
                           .h_kv = c->n_kv_heads,
                           .d = c->d_model / c->n_heads};
    if (U > 1) { /* the SDPA calls are mapped on the ring's own layout alone */
        snprintf(t->sdpa_why, sizeof t->sdpa_why,
                 "our kernels: Ulysses groups, [parallel] ulysses = %d (SDPA calls are mapped "
                 "on the ring alone)",
                 U);
        rc->sdpa = 0;
    } else
        rc->sdpa =
            choose_sdpa(c->kernel, c->deterministic, t->choices.on_device, t->choices.ring_bf16,
                        &sc, t->offline, t->sdpa_why, sizeof t->sdpa_why);
    if (rc->sdpa < 0) {
        snprintf(err, err_len, "%s", t->sdpa_why);
        return -1;
    }
    return 0;
}

static int make_source(trainer *t, char *err, size_t err_len)
{
    const train_config *c = &t->cfg;
    int documents = (t->choices.mask.flags & BK_ATTN_DOCUMENT) != 0;
    if (t->choices.source == SOURCE_HDF5)
        t->data = hdf5_source_create(c->path, c->vocab, t->choices.shuffled, c->data_seed,
                                     documents, &t->shard, err, err_len);
    else {
        synthetic_spec spec = {.task = c->task, .doc_len = c->doc_len,
                               .recall = train_config_recall(c)};
        t->data = synthetic_source_create(&spec, c->vocab, c->data_seed, &t->shard, err, err_len);
    }
    return t->data ? 0 : -1;
}

/* Rank 0 prints the path of every pair's device buffers (collective): a row
 * per rank up to 64 ranks, else how many pairs take each path. */
static int report_device_paths(trainer *t)
{
    size_t n = (size_t)t->world_size;
    char *table = malloc(n * n);
    int failed = !table || bt_world_device_path_table(t->world, table) != BT_OK;
    if (!failed && t->rank == 0 && n > 1) {
        printf("device paths from each rank to every rank (c copy, n nccl, d direct, s staged):\n");
        for (size_t r = 0; r < n && n <= 64; r++)
            printf("  rank %zu: %.*s\n", r, (int)n, table + r * n);
        size_t count[4] = {0};
        for (size_t i = 0; i < n * n && n > 64; i++)
            for (int k = 0; k < 4; k++) count[k] += table[i] == "cnds"[k];
        if (n > 64)
            printf("  pairs: copy %zu, nccl %zu, direct %zu, staged %zu\n", count[0], count[1],
                   count[2], count[3]);
        fflush(stdout);
    }
    free(table);
    return failed ? -1 : 0;
}

/* This rank and the ranks it reaches through NCCL (its node's, when NCCL
 * serves the node), or 0 when it reaches none. */
static int nccl_ranks_here(trainer *t)
{
    bt_comm *world = bt_world_comm(t->world);
    int ranks = 1;
    for (int peer = 0; peer < t->world_size; peer++) {
        const char *path = bt_comm_device_path(world, peer);
        ranks += path && strcmp(path, "nccl") == 0;
    }
    return ranks > 1 ? ranks : 0;
}

/* [train] device = cuda: this rank's GPU (its local index modulo the node's
 * GPUs: ranks beyond the count share), and the transport told how to move
 * device memory. Collective: the ranks agree the device is there before the
 * transport's collective set-up. 0 or an exit status. */
static int make_queue(trainer *t, char *err, size_t err_len)
{
    t->queue = bk_host_queue();
    if (!t->choices.on_device) return 0;
    int count = 0, failed = !bk_device_available() ||
                            bk_device_use(bt_world_local_rank(t->world), &count) != BK_OK;
    if (failed)
        snprintf(err, err_len, "[train] device = cuda: no device in this program (its backend: %s)",
                 bk_device_backend_name());
    /* cuBLASLt's workspace now: the memory check then reads the free memory
     * without it, and no step allocates it */
    else if ((failed = bk_device_prepare() != BK_OK))
        snprintf(err, err_len, "[train] device = cuda: cannot make cuBLASLt's handle and workspace");
    int status = trainer_agree_on_own_part(t, failed, err, err_len);
    if (status != 0) return status;
    t->device_index = bt_world_local_rank(t->world) % count;
    t->device_count = count;
    t->queue = (bk_queue){BK_DEVICE, NULL, 0, NULL};
    if (transport_link_device(t->world, t->device_index) == BT_OK && report_device_paths(t) == 0) {
        t->nccl_ranks = nccl_ranks_here(t);
        return 0;
    }
    snprintf(err, err_len, "%s", bt_world_error(t->world));
    return EXIT_RUN_FAILURE;
}

/* err for bytes of the model's memory that `what` could not have: -1. */
static int no_model_memory(const trainer *t, size_t bytes, const char *what, char *err,
                           size_t err_len)
{
    if (t->arena) {
        bk_arena_stats a = bk_arena_stats_of(t->arena);
        snprintf(err, err_len,
                 "out of device memory: cannot allocate %zu bytes for %s in the device arena "
                 "(largest free piece %zu bytes of %zu)",
                 bytes, what, a.largest_free, a.capacity);
    } else if (t->choices.on_device)
        snprintf(err, err_len, "out of device memory: cannot allocate %zu bytes for %s", bytes, what);
    else
        bu_no_memory(err, err_len, bytes, what);
    return -1;
}

/* The model's buffer of bytes (a multiple of 4) for `what`, zeroed, in the
 * memory of the run's queue: host memory, or device memory on a device. */
static void *model_buffer(trainer *t, size_t bytes, const char *what, char *err, size_t err_len)
{
    float *p = NULL;
    if (bk_alloc_floats(&t->queue, (int64_t)(bytes / sizeof(float)), 0.0f, &p) == BK_OK) return p;
    no_model_memory(t, bytes, what, err, err_len);
    return NULL;
}

static void model_buffer_free(trainer *t, void *p)
{
    bk_free(&t->queue, p);
}

/* The parameters [begin, end) of [model] init_from into host [end - begin],
 * read by every rank. */
static int init_source_take_params(trainer *t, float *host, int64_t begin, int64_t end, char *err,
                                   size_t err_len)
{
    init_source s;
    char why[1024];
    if (init_source_open(t->cfg.init_from, &s, why, sizeof why) == 0 &&
        init_source_params_range(&s, &t->model, begin, end, host, why, sizeof why) == 0)
        return 0;
    snprintf(err, err_len, "[model] init_from: %s", why);
    return -1;
}

/* Without an optimizer (forward only): the bf16 parameters from host [n_params]. */
static int upload_bf16(trainer *t, const float *host)
{
    size_t n = (size_t)t->model.n_params;
    uint16_t *h16 = malloc(n * sizeof *h16);
    if (!h16) return -1;
    for (size_t i = 0; i < n; i++) h16[i] = bk_float_to_bf16(host[i]);
    int rc = bk_device_upload(&t->queue, t->params16, h16, n * sizeof *h16) == BK_OK ? 0 : -1;
    free(h16);
    return rc;
}

/* zero = 3: this rank's masters alone, initialised or read from [model]
 * init_from, without the whole model on the host: in place on the host,
 * through a copy of the shard to a device. */
static int init_own_masters(trainer *t, char *err, size_t err_len)
{
    const train_config *c = &t->cfg;
    int64_t begin, end;
    zero_shard(t->opt, &begin, &end);
    size_t bytes = (size_t)(end > begin ? end - begin : 1) * sizeof(float);
    float *own = zero_state_on_host(t->opt)
                     ? zero_masters(t->opt)
                     : bu_calloc(bytes, "the parameters' initial values", err, err_len);
    if (!own) return -1;
    int failed = 0;
    if (!c->init_from[0])
        model_init_params_range(&t->model, own, begin, end, c->seed, c->init_std);
    else
        failed = init_source_take_params(t, own, begin, end, err, err_len) != 0;
    if (!failed && own != zero_masters(t->opt) && zero_set_masters(t->opt, own) != 0) {
        snprintf(err, err_len, "cannot copy the parameters to the optimizer's memory");
        failed = 1;
    }
    if (own != zero_masters(t->opt)) free(own);
    return failed ? -1 : 0;
}

/* The parameters, initialised or read from [model] init_from (on the host,
 * then copied to the device; with bf16 parameters into the optimizer's
 * masters too, and rounded; at zero = 3 the rank's masters alone). */
static int init_params(trainer *t, char *err, size_t err_len)
{
    const train_config *c = &t->cfg;
    if (trainer_zero_stage(t) == 3) return init_own_masters(t, err, err_len);
    size_t bytes = (size_t)t->model.n_params * sizeof(float);
    float *host = t->choices.on_device
                      ? bu_calloc(bytes, "the parameters' initial values", err, err_len)
                      : t->params;
    if (!host) return -1;
    if (!c->init_from[0]) {
        model_init_params(&t->model, host, c->seed, c->init_std);
    } else if (init_source_take_params(t, host, 0, t->model.n_params, err, err_len) != 0) {
        if (host != t->params) free(host);
        return -1;
    }
    if (host == t->params) return 0;
    int failed = !t->params16 ? bk_device_upload(&t->queue, t->params, host, bytes) != BK_OK
                 : t->opt     ? zero_set_params(t->opt, host, t->params16) != 0
                              : upload_bf16(t, host) != 0;
    free(host);
    if (failed) snprintf(err, err_len, "cannot copy the parameters to the device");
    return failed ? -1 : 0;
}

/* What the model's memory holds now: between the setup's parts, what each
 * takes (t->held). */
static size_t held_now(const trainer *t)
{
    return bk_held_bytes(&t->queue);
}

/* The parameters the model reads: at zero = 3 the optimizer's windows, else
 * the whole buffer of their type (t->params or t->params16); 0 or -1 with err. */
static int make_params(trainer *t, char *err, size_t err_len)
{
    size_t failed = 0;
    if (trainer_zero_stage(t) == 3)
        return zero_make_param_windows(t->opt, &t->model, &failed) == 0
                   ? 0
                   : no_model_memory(t, failed, "the parameters' windows", err, err_len);
    void *params = model_buffer(t, t->mem.params, "the parameters", err, err_len);
    if (t->choices.bf16_matmul)
        t->params16 = params;
    else
        t->params = params;
    return params ? 0 : -1;
}

/* The gradients the backward writes (training only): at zero >= 2 the
 * optimizer's windows, else the whole buffer t->grads; 0 or -1 with err. */
static int make_grads(trainer *t, char *err, size_t err_len)
{
    size_t failed = 0;
    if (trainer_zero_stage(t) >= 2)
        return zero_make_grad_windows(t->opt, &t->model, &failed) == 0
                   ? 0
                   : no_model_memory(t, failed, "the gradients' windows", err, err_len);
    if (t->mem.grads && !(t->grads = model_buffer(t, t->mem.grads, "the gradients", err, err_len)))
        return -1;
    return 0;
}

/* The parameters (initialised), gradients and token buffers, the metrics
 * file: this rank's own, 0 or -1 with err. The model reads and writes
 * through the optimizer's sink and source: model -> ZeRO -> transport. */
static int make_buffers(trainer *t, char *err, size_t err_len)
{
    const train_config *c = &t->cfg;
    const trainer_memory *m = &t->mem;
    size_t before = held_now(t);
    if (make_params(t, err, err_len) != 0) return -1;
    t->held.params = held_now(t) - before;
    before = held_now(t);
    if (make_grads(t, err, err_len) != 0) return -1;
    t->held.grads = held_now(t) - before;
    if (t->opt) {
        t->grad_sink = zero_grad_sink(t->opt, t->grads);
        if (zero_param_source(t->opt)) model_runner_gather(t->runner, zero_param_source(t->opt));
    }
    /* the tokens in the model's memory: the host's, or on a device its copy */
    before = held_now(t);
    if (!(t->tokens = bu_calloc(m->tokens / 2, "the tokens", err, err_len)) ||
        !(t->labels = bu_calloc(m->tokens / 2, "the labels", err, err_len)) ||
        (m->segments && !(t->segments = bu_calloc(m->segments, "the document ids", err, err_len))))
        return -1;
    if (t->choices.on_device &&
        (!(t->dev_tokens = model_buffer(t, m->tokens / 2, "the tokens", err, err_len)) ||
         !(t->dev_labels = model_buffer(t, m->tokens / 2, "the labels", err, err_len))))
        return -1;
    t->held.tokens = held_now(t) - before;
    if (init_params(t, err, err_len) != 0) return -1;
    if (t->rank == 0 && c->metrics[0] && !(t->metrics = fopen(c->metrics, "w"))) {
        snprintf(err, err_len, "[train] metrics: cannot write %s", c->metrics);
        return -1;
    }
    return 0;
}

/* The optimizer (ZeRO at the run's stage), made together by every rank (before the parameters,
 * so that its decay mask [n_params] is gone before they come). */
static int make_optimizer(trainer *t, char *err, size_t err_len)
{
    const train_config *c = &t->cfg;
    size_t np = (size_t)t->model.n_params;
    uint8_t *decay = malloc(np ? np : 1);
    if (decay) model_decay_mask(&t->model, decay);
    zero_hparams hp = {.beta1 = c->beta1,
                       .beta2 = c->beta2,
                       .eps = c->adam_eps,
                       .weight_decay = c->weight_decay,
                       .grad_clip = c->grad_clip};
    /* collective: a rank without its mask still takes part (with a size
     * zero_create refuses), so that every rank fails together */
    size_t before = held_now(t);
    t->opt = zero_create(bt_world_comm(t->world), decay ? t->model.n_params : -1, decay, &hp,
                         &t->queue, t->choices.bf16_matmul ? BK_BF16 : BK_F32, trainer_sharding(t));
    t->held.optimizer = held_now(t) - before;
    free(decay);
    if (t->opt) return 0;
    if (bt_world_error(t->world)[0]) {
        snprintf(err, err_len, "%s", bt_world_error(t->world));
        return EXIT_RUN_FAILURE;
    }
    bu_no_memory(err, err_len, t->mem.optimizer + np, "the optimizer (on this rank or another)");
    return trainer_fail_together(t, t->rank == 0, 0, err, err_len);
}

/* The sequence layout, the runner's configuration and the rank's memory
 * counted from them (t->mem): the part of the setup that needs no world, so
 * that trainer_plan_offline counts exactly what a run counts. */
static int plan_rank_memory(trainer *t, int nodes, int local_size, model_runner_config *rc,
                            char *err, size_t err_len)
{
    const train_config *c = &t->cfg;
    if (seq_layout_init(&t->layout, t->choices.layout, c->cp, c->seq_len, err, err_len) != 0 ||
        seq_layout_set_ulysses(&t->layout, c->ulysses, err, err_len) != 0)
        return -1;
    if (runner_config(t, nodes, local_size, rc, err, err_len) != 0) return -1;
    return trainer_plan_memory(t, rc, err, err_len);
}

/* The memory choice ch written into the configuration (so that the
 * checkpoints record it) and t's choices. */
static void take_memory_choice(trainer *t, const memory_choice *ch)
{
    memory_choice_apply(ch, &t->cfg);
    t->zero_stage = ch->zero_stage;
    t->choices.keep = choose_keep(ch->kept_fraction);
}

/* The ZeRO stage, the attention outputs kept and the layers kept: those
 * given, and for each left to auto the first of choose_memory_candidates
 * whose memory fits on every rank (trainer_memory_fits), the last when none
 * does, for the check to refuse naming the parts; zero = auto on a resumed
 * run takes the stage of its checkpoint. The values chosen are written back
 * into the configuration, so that the checkpoints record them. t->mem,
 * t->layout and rc are counted for them. 0, or an exit status with err. */
static int choose_memory(trainer *t, model_runner_config *rc, char *err, size_t err_len)
{
    train_config *c = &t->cfg;
    int nodes = bt_world_n_nodes(t->world), local = bt_world_local_size(t->world);
    int given = train_config_zero_stage(c), resumed = 0;
    if (!given && t->opts.resume && !t->opts.forward_only)
        resumed = trainer_checkpoint_zero_stage(t);
    int lowest = train_config_lowest_zero_stage(c);
    if (resumed && resumed < lowest)
        resumed = lowest; /* a stage-1 checkpoint, optimizer on the host */
    int kept_auto = c->attn_kept_fraction == TRAIN_KEPT_AUTO,
        layers_auto = c->keep_layers == TRAIN_AUTO;
    memory_choice list[MEMORY_CHOICES_MAX];
    int n = choose_memory_candidates(
        given ? given : resumed, lowest, c->attn_kept_fraction, c->keep_layers,
        c->ulysses == 1 && keep_half_allowed(t->choices.layout, &t->choices.mask), list);
    for (int i = 0; i < n; i++) {
        take_memory_choice(t, &list[i]);
        if (plan_rank_memory(t, nodes, local, rc, err, err_len) != 0) return EXIT_USAGE;
        if (i + 1 == n) break;
        int fits = trainer_memory_fits(t);
        if (fits < 0) {
            snprintf(err, err_len, "%s", bt_world_error(t->world));
            return EXIT_RUN_FAILURE;
        }
        if (fits) break;
    }
    if (!given)
        t->zero_chosen = resumed ? "the stage of the checkpoint resumed from"
                                 : "the smallest stage whose memory fits";
    t->memory_chosen = kept_auto || layers_auto;
    return 0;
}

/* trainer_plan_offline on t, whose cfg is set; rc gets the runner's
 * configuration. */
static int plan_offline(trainer *t, int world_size, int nodes, model_runner_config *rc, char *err,
                        size_t err_len)
{
    const train_config *c = &t->cfg;
    if (err_len) err[0] = '\0';
    t->rank = 0;
    t->world_size = world_size;
    t->offline = 1;
    t->queue = bk_host_queue();
    if (nodes < 1 || world_size % nodes != 0) {
        snprintf(err, err_len, "%d ranks do not split into %d nodes of equal size", world_size,
                 nodes);
        return -1;
    }
    if (train_config_validate(c, world_size, err, err_len) != 0 ||
        make_model_layout(t, err, err_len) != 0 || make_choices(t, err, err_len) != 0)
        return -1;
    if (t->choices.on_device) {
        t->queue = (bk_queue){BK_DEVICE, NULL, 0, NULL}; /* no device touched */
        /* a GPU per rank: NCCL serves every node of several ranks unless told not to */
        int local = world_size / nodes;
        t->nccl_ranks = local > 1 && c->intra != INTRA_UCX ? local : 0;
    }
    t->zero_stage = train_config_zero_stage(c);
    if (t->zero_stage == 0 || c->attn_kept_fraction == TRAIN_KEPT_AUTO ||
        c->keep_layers == TRAIN_AUTO) {
        snprintf(err, err_len,
                 "[parallel] zero, [memory] attn_kept_fraction or keep_layers = "
                 "auto: the caller chooses (choose_memory_candidates)");
        return -1;
    }
    return plan_rank_memory(t, nodes, world_size / nodes, rc, err, err_len);
}

/* What trainer_plan_offline returns, from t after plan_offline. */
static trainer_memory_plan memory_plan_of(const trainer *t)
{
    trainer_memory_plan out = {.mem = t->mem,
                               .n_params = t->model.n_params,
                               .tokens_per_rank = t->layout.n,
                               .zero_stage = trainer_zero_stage(t),
                               .on_device = t->choices.on_device};
    trainer_nccl_bytes(t, out.nccl_basis, sizeof out.nccl_basis);
    return out;
}

int trainer_plan_offline(const train_config *cfg, int world_size, int nodes,
                         trainer_memory_plan *out, char *err, size_t err_len)
{
    trainer t;
    memset(&t, 0, sizeof t);
    t.cfg = *cfg;
    model_runner_config rc;
    int status = plan_offline(&t, world_size, nodes, &rc, err, err_len);
    if (status == 0) *out = memory_plan_of(&t);
    trainer_free_parts(&t);
    return status;
}

int trainer_plan_step_offline(const train_config *cfg, int world_size, int nodes,
                              trainer_step_plan *out, char *err, size_t err_len)
{
    trainer t;
    memset(&t, 0, sizeof t);
    memset(out, 0, sizeof *out);
    t.cfg = *cfg;
    model_runner_config rc;
    int status = plan_offline(&t, world_size, nodes, &rc, err, err_len);
    if (status == 0) status = model_runner_plan_rings(&rc, &out->rings, err, err_len);
    if (status == 0) {
        const train_config *c = &t.cfg;
        attn_need_ctx need = {.mask = t.choices.mask, .N = c->seq_len};
        double N = (double)c->seq_len, sequences = (double)c->dp * c->micro_batches;
        double fraction = (double)attn_need_sequence_pairs(&need) / (N * N);
        out->memory = memory_plan_of(&t);
        out->dims = t.model.dims;
        out->ranks = world_size, out->nodes = nodes;
        out->dp = c->dp, out->cp = c->cp, out->micro_batches = c->micro_batches;
        out->flops_per_step = model_train_flops(&t.model, c->seq_len, fraction, sequences);
        out->tokens_per_step = (int64_t)(N * sequences);
        out->keep = rc.keep;
        out->keep_layers = rc.keep_layers;
        out->bf16_matmul = rc.bf16_matmul;
        out->sdpa = rc.sdpa;
    }
    trainer_free_parts(&t);
    return status;
}

void trainer_step_plan_free(trainer_step_plan *p)
{
    model_rings_free(&p->rings);
}

trainer *trainer_create(const train_config *cfg, const trainer_opts *opts, bt_world *world)
{
    trainer *t = calloc(1, sizeof *t);
    if (!t) return NULL;
    t->cfg = *cfg, t->opts = *opts, t->world = world;
    t->rank = bt_world_rank(world);
    return t;
}

int trainer_rank(const trainer *t)
{
    return t->rank;
}

int trainer_setup(trainer *t, char *err, size_t err_len)
{
    train_config *c = &t->cfg;
    if (err_len) err[0] = '\0';
    t->rank = bt_world_rank(t->world);
    t->world_size = bt_world_size(t->world);
    t->queue = bk_host_queue();
    t->baseline_bytes = bu_rss_bytes();
    if (init_source_take_model(c, err, err_len) != 0 ||
        train_config_validate(c, t->world_size, err, err_len) != 0)
        return EXIT_USAGE;
    if (t->opts.resume && !c->checkpoint_dir[0]) {
        snprintf(err, err_len, "--resume needs [train] checkpoint_dir");
        return EXIT_USAGE;
    }
    if (make_model_layout(t, err, err_len) != 0 ||
        ulysses_fits_nodes(c, bt_world_n_nodes(t->world), bt_world_local_size(t->world), err,
                           err_len) != 0)
        return EXIT_USAGE;
    if (bt_comm_grid(t->world, c->dp, c->cp, &t->dp_comm, &t->cp_comm) != BT_OK) {
        snprintf(err, err_len, "%s", bt_world_error(t->world));
        return EXIT_RUN_FAILURE;
    }
    t->dp_rank = bt_comm_rank(t->dp_comm);
    t->cp_rank = bt_comm_rank(t->cp_comm);
    int U = c->ulysses;
    if (U > 1 &&
        (bt_comm_split(t->cp_comm, t->cp_rank / U, t->cp_rank % U, &t->ulysses_group) != BT_OK ||
         bt_comm_split(t->cp_comm, t->cp_rank % U, t->cp_rank / U, &t->ulysses_ring) != BT_OK)) {
        snprintf(err, err_len, "%s", bt_world_error(t->world));
        return EXIT_RUN_FAILURE;
    }
    if (make_choices(t, err, err_len) != 0) return EXIT_USAGE;
    int status = make_queue(t, err, err_len);
    if (status != 0) return status;
    /* on a device, the runtime's own host memory is part of the baseline */
    if (t->queue.where == BK_DEVICE) t->baseline_bytes = bu_rss_bytes();
    model_runner_config rc;
    status = choose_memory(t, &rc, err, err_len);
    if (status != 0) return status;
    t->shard = token_shard_of(&t->layout, t->cp_rank);
    status = trainer_check_memory(t, err, err_len);
    if (status == 0) status = trainer_make_arena(t, err, err_len);
    if (status != 0) return status;
    int failed = make_source(t, err, err_len) != 0 ||
                 !(t->runner = model_runner_create(&rc, err, err_len));
    if (t->runner) t->held.model = model_runner_held(t->runner);
    status = trainer_agree_on_own_part(t, failed, err, err_len);
    if (status == 0 && !t->opts.forward_only) status = make_optimizer(t, err, err_len);
    if (status == 0)
        status = trainer_agree_on_own_part(t, make_buffers(t, err, err_len) != 0 ||
                                          trainer_check_scratch_room(t, err, err_len) != 0,
                                   err, err_len);
    return status;
}

/* The first step to run: 1, or the one after the checkpoint resumed from. */
static int64_t first_step(trainer *t)
{
    if (!t->opts.resume) return 1;
    char err[512];
    int64_t done = trainer_load_checkpoint(t, err, sizeof err);
    if (done < 0) {
        fprintf(stderr, "burst train: rank %d: --resume: %s\n", t->rank, err);
        return -1;
    }
    if (t->rank == 0)
        printf("resumed from %s/step-%lld\n", t->cfg.checkpoint_dir, (long long)done);
    return done + 1;
}

/* Checkpoints after step when it is due; 0, or STOP_AGREED when it failed. */
static int checkpoint_if_due(trainer *t, int64_t step)
{
    const train_config *c = &t->cfg;
    int last = step == c->steps || step == t->opts.stop_after;
    if (!c->checkpoint_dir[0] || !(last || (c->checkpoint_every > 0 && step % c->checkpoint_every == 0)))
        return 0;
    char err[512];
    if (trainer_save_checkpoint(t, step, err, sizeof err) != 0) {
        fprintf(stderr, "burst train: rank %d: %s\n", t->rank, err);
        return STOP_AGREED;
    }
    if (t->rank == 0) printf("checkpoint: %s/step-%lld\n", c->checkpoint_dir, (long long)step);
    return 0;
}

int trainer_run(trainer *t)
{
    const train_config *c = &t->cfg;
    if (trainer_report_start(t) != 0) return EXIT_RUN_FAILURE;
    if (t->opts.dry_run) {
        if (t->rank == 0) printf("dry run: set up and fits; no step taken\n");
        return 0;
    }
    int64_t first = first_step(t), step;
    if (first < 0) return EXIT_USAGE;
    double t_start = bu_now();
    trainer_step_result res = {0};
    int status = 0;
    for (step = first; step <= c->steps && status == 0; step++) {
        double t0 = bu_now();
        if (t->choices.on_device) bk_device_step_begin(step); /* the device's account */
        status = trainer_step(t, step, &res);
        if (t->choices.on_device) bk_device_step_end();
        if (status != 0) break;
        double dt = bu_now() - t0;
        trainer_report_progress(t, step, first, &res, dt, bu_now() - t_start);
        if (step == first && t->arena) { /* every buffer and scratch of a step have been used */
            char when[48];
            snprintf(when, sizeof when, "after step %lld", (long long)step);
            trainer_report_arena(t, when);
        }
        status = checkpoint_if_due(t, step);
        if (status != 0) break;
        trainer_report_metrics(t, step, &res, dt);
        if (step == t->opts.stop_after) {
            step++;
            break;
        }
    }
    if (t->metrics) fclose(t->metrics);
    t->metrics = NULL;
    if (status == 0 && step - 1 == c->steps) /* not after --stop-after: training goes on */
        status = trainer_evaluate(t);
    if (status == 0) trainer_report_arena(t, "at the end"); /* every rank: collective */
    if (status == 0 && t->rank == 0) {
        double peak = bu_peak_rss_bytes(), est = trainer_estimated_host_bytes(t);
        char p[32], e[32];
        printf("done: step %lld of %lld, final loss %.4f; peak host memory rank 0 %s (estimated "
               "%s, ratio %.2f)\n",
               (long long)(step - 1), (long long)c->steps, res.loss,
               bu_human_bytes(peak, p, sizeof p), bu_human_bytes(est, e, sizeof e), peak / est);
    }
    return status;
}

void trainer_free_parts(trainer *t)
{
    model_runner_free(t->runner);
    model_layout_free(&t->model);
    if (t->opt) zero_free(t->opt);
    if (t->data) t->data->free(t->data);
    bt_comm_free(t->dp_comm);
    bt_comm_free(t->cp_comm);
    bt_comm_free(t->ulysses_group), bt_comm_free(t->ulysses_ring);
    model_buffer_free(t, t->params), model_buffer_free(t, t->params16);
    model_buffer_free(t, t->grads);
    if (t->choices.on_device)
        model_buffer_free(t, t->dev_tokens), model_buffer_free(t, t->dev_labels);
    free(t->tokens), free(t->labels);
    free(t->segments), free(t->sparse_bits);
    if (t->metrics) fclose(t->metrics);
    bk_arena_destroy(t->arena); /* after every buffer that came from it */
    memset(t, 0, sizeof *t);
}

void trainer_free(trainer *t)
{
    if (!t) return;
    trainer_free_parts(t);
    free(t);
}

/* Leaves the world: in order after a run every rank finished or stopped
 * together, by abort after a failure that other ranks may not have seen. */
int trainer_leave_world(trainer *t, int status)
{
    if (status == 0 || status == STOP_AGREED) {
        bt_comm_free(t->dp_comm);
        bt_comm_free(t->cp_comm);
        bt_comm_free(t->ulysses_group), bt_comm_free(t->ulysses_ring);
        t->dp_comm = t->cp_comm = t->ulysses_group = t->ulysses_ring = NULL;
        int finalized = bt_world_finalize(t->world) == BT_OK;
        /* the ranks agreed to stop or finished: a finalize that fails lost a
         * rank after that, which no one has reported yet */
        if (!finalized) trainer_report_world_failure(t);
        status = status == 0 && finalized ? 0 : EXIT_RUN_FAILURE;
    } else {
        bt_world_abort(t->world);
    }
    trainer_free(t);
    return status;
}
