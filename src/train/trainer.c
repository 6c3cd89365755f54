/* trainer.c: setting a rank up, the training loop and the teardown; see
 * trainer.h. Setup refuses everything it can before allocating: a bad
 * configuration, a model that cannot fit in the node's memory, a data source
 * that cannot be opened. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "src/train/trainer.h"
#include "util/clock.h"
#include "util/exit_codes.h"
#include "util/parse.h"

int64_t trainer_sample_index(const train_config *c, int64_t step, int dp_rank, int mb)
{
    return ((step - 1) * c->dp + dp_rank) * c->micro_batches + mb;
}

/* Parameters, gradients, the reduce buffer and the moments, for every rank of
 * this node: refuse a model that cannot fit before allocating it. */
static int check_model_fits(trainer *t, char *err, size_t err_len)
{
    int local = bt_world_local_size(t->world);
    double need = 4.0 * (double)t->model.n_params * sizeof(float) * (local > 0 ? local : 1);
    double avail = trainer_available_bytes();
    if (avail <= 0 || need <= avail) return 0;
    char need_text[32], avail_text[32];
    snprintf(err, err_len, "[model] preset = %s: %lld parameters need at least %s on this node "
                           "(%d ranks), it has %s available",
             t->cfg.preset, (long long)t->model.n_params,
             bu_human_bytes(need, need_text, sizeof need_text), local,
             bu_human_bytes(avail, avail_text, sizeof avail_text));
    return -1;
}

static void make_model_layout(trainer *t)
{
    const train_config *c = &t->cfg;
    model_dims dims = {.layers = c->layers, .d_model = c->d_model, .n_heads = c->n_heads,
                       .n_kv_heads = c->n_kv_heads, .head_dim = c->d_model / c->n_heads,
                       .d_ff = c->d_ff, .vocab = c->vocab, .tied = c->tied_embeddings,
                       .rope_theta = (float)c->rope_theta, .rope_scaling = (float)c->rope_scaling,
                       .norm_eps = (float)c->norm_eps};
    model_layout_init(&t->model, &dims);
}

static void make_plan(trainer *t)
{
    const train_config *c = &t->cfg;
    train_plan *p = &t->plan;
    p->layout = plan_layout(c->layout, c->mask);
    p->mask = plan_mask(c->mask, c->window);
    p->backward = plan_backward(c->backward);
    p->ring = plan_ring(c->ring);
    p->source = plan_source(c->source);
    p->shuffled = plan_shuffled(c->sampling);
    p->on_nonfinite = plan_on_nonfinite(c->on_nonfinite);
    p->keep = plan_keep(c->ckpt_fraction);
}

/* The model runner over this rank's CP group, on the planned ring. */
static int make_runner(trainer *t, char *err, size_t err_len)
{
    const train_config *c = &t->cfg;
    ring_topology topo;
    int cp_nodes;
    if (plan_topology(t->plan.ring, c->cp, bt_world_n_nodes(t->world),
                      bt_world_local_size(t->world), &topo, &cp_nodes) != 0) {
        snprintf(err, err_len, "[parallel] ring = double, but the CP group of %d ranks does not span "
                               "several nodes with the same number of ranks each", c->cp);
        return -1;
    }
    model_runner_config rc = {
        .model = &t->model, .cp = t->cp_comm, .layout = t->layout, .topo = topo, .nodes = cp_nodes,
        .mask = t->plan.mask, .backward = t->plan.backward, .keep = t->plan.keep,
        .micro_batches = c->micro_batches, .fused_head = c->fused_head,
        .head = {.chunk_tokens = c->head_chunk, .z_loss = (float)c->z_loss, .ignore_index = TOKEN_IGNORE},
        .queue = &t->queue};
    t->runner = model_runner_create(&rc, err, err_len);
    return t->runner ? 0 : -1;
}

static int make_source(trainer *t, char *err, size_t err_len)
{
    const train_config *c = &t->cfg;
    if (t->plan.source == SOURCE_HDF5)
        t->data = hdf5_source_create(c->path, c->vocab, t->plan.shuffled, c->data_seed, &t->shard,
                                     err, err_len);
    else
        t->data = synthetic_source_create(c->task, c->vocab, c->data_seed, &t->shard, err, err_len);
    return t->data ? 0 : -1;
}

/* Parameters (initialised), gradients, the optimizer and the token buffers. */
static void make_state(trainer *t)
{
    const train_config *c = &t->cfg;
    size_t np = (size_t)t->model.n_params;
    t->params = malloc(np * sizeof(float));
    t->grads = malloc(np * sizeof(float));
    model_init_params(&t->model, t->params, c->seed, c->init_std);
    uint8_t *decay = malloc(np);
    model_decay_mask(&t->model, decay);
    zero1_hparams hp = {.beta1 = c->beta1, .beta2 = c->beta2, .eps = c->adam_eps,
                        .weight_decay = c->weight_decay, .grad_clip = c->grad_clip};
    t->opt = zero1_create(bt_world_comm(t->world), t->model.n_params, decay, &hp);
    free(decay);
    size_t n = (size_t)t->layout.n * (size_t)c->micro_batches;
    t->tokens = malloc(n * sizeof(int64_t));
    t->labels = malloc(n * sizeof(int64_t));
}

int trainer_setup(trainer *t, char *err, size_t err_len)
{
    train_config *c = &t->cfg;
    t->rank = bt_world_rank(t->world);
    t->world_size = bt_world_size(t->world);
    t->queue = bk_host_queue();
    t->baseline_bytes = trainer_rss_bytes();
    if (train_config_validate(c, t->world_size, err, err_len) != 0) return EXIT_USAGE;
    make_model_layout(t);
    if (check_model_fits(t, err, err_len) != 0) return EXIT_USAGE;
    if (bt_comm_grid(t->world, c->dp, c->cp, &t->dp_comm, &t->cp_comm) != BT_OK) {
        snprintf(err, err_len, "%s", bt_world_error(t->world));
        return EXIT_RUN_FAILURE;
    }
    t->dp_rank = bt_comm_rank(t->dp_comm);
    t->cp_rank = bt_comm_rank(t->cp_comm);
    make_plan(t);
    if (seq_layout_init(&t->layout, t->plan.layout, c->cp, c->seq_len, err, err_len) != 0)
        return EXIT_USAGE;
    t->shard = token_shard_of(&t->layout, t->cp_rank);
    if (make_runner(t, err, err_len) != 0 || make_source(t, err, err_len) != 0) return EXIT_USAGE;
    if (t->opts.resume && !c->checkpoint_dir[0]) {
        snprintf(err, err_len, "--resume needs [train] checkpoint_dir");
        return EXIT_USAGE;
    }
    make_state(t);
    if (t->rank == 0 && c->metrics[0] && !(t->metrics = fopen(c->metrics, "w"))) {
        snprintf(err, err_len, "[train] metrics: cannot write %s", c->metrics);
        return EXIT_USAGE;
    }
    return 0;
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

/* 0, STOP_AGREED, or EXIT_RUN_FAILURE when this rank alone failed. */
static int evaluate_and_report(trainer *t)
{
    int64_t correct, total;
    char err[512] = "";
    int status = trainer_evaluate(t, &correct, &total, err, sizeof err);
    if (status != 0) {
        fprintf(stderr, "burst train: rank %d: evaluation: %s\n", t->rank, err);
        return status == EXIT_RUN_FAILURE ? status : STOP_AGREED;
    }
    if (t->rank == 0)
        printf("passkey retrieval accuracy: %.1f%% (%lld of %lld held-out samples; chance "
               "about %.1f%%)\n",
               total ? 100.0 * (double)correct / (double)total : 0.0, (long long)correct,
               (long long)total, 100.0 / t->cfg.vocab);
    return 0;
}

int trainer_run(trainer *t)
{
    const train_config *c = &t->cfg;
    trainer_report_start(t);
    int64_t first = first_step(t), step;
    if (first < 0) return EXIT_USAGE;
    double t_start = bu_now(), loss = 0, gnorm = 0;
    int status = 0;
    for (step = first; step <= c->steps && status == 0; step++) {
        double t0 = bu_now();
        int skipped = 0;
        status = trainer_step(t, step, &loss, &gnorm, &skipped);
        if (status != 0) break;
        double dt = bu_now() - t0;
        trainer_report_progress(t, step, first, loss, gnorm, dt, bu_now() - t_start);
        status = checkpoint_if_due(t, step);
        if (status != 0) break;
        trainer_report_metrics(t, step, loss, gnorm, skipped, dt);
        if (step == t->opts.stop_after) {
            step++;
            break;
        }
    }
    if (t->metrics) fclose(t->metrics);
    t->metrics = NULL;
    if (status == 0 && c->eval_path[0]) status = evaluate_and_report(t);
    if (status == 0 && t->rank == 0) {
        double peak = trainer_peak_rss_bytes(), est = trainer_estimated_bytes(t);
        char p[32], e[32];
        printf("done: step %lld of %lld, final loss %.4f; peak memory rank 0 %s (estimated %s, "
               "ratio %.2f)\n",
               (long long)(step - 1), (long long)c->steps, loss, bu_human_bytes(peak, p, sizeof p),
               bu_human_bytes(est, e, sizeof e), peak / est);
    }
    return status;
}

void trainer_free(trainer *t)
{
    model_runner_free(t->runner);
    model_layout_free(&t->model);
    if (t->opt) zero1_free(t->opt);
    if (t->data) t->data->free(t->data);
    bt_comm_free(t->dp_comm);
    bt_comm_free(t->cp_comm);
    free(t->params), free(t->grads), free(t->tokens), free(t->labels);
    if (t->metrics) fclose(t->metrics);
    memset(t, 0, sizeof *t);
}
