/* trainer_ckpt.c: checkpoints of the run (trainer.h) through io/checkpoint.h.
 * Saving is three collective phases: rank 0 opens the step's directory, every
 * rank writes its shard (of the fp32 parameters and of the moments; rank 0
 * also the metadata), rank 0 commits; ranks agree after each phase, so a
 * failure anywhere leaves the previous checkpoint whole and every rank stops.
 * No rank gathers or writes more than its shard, whatever the ZeRO stage, so
 * one format serves them all. Resuming refuses a checkpoint whose
 * configuration, sampler position or RNG state this run would not continue,
 * naming the key and both values. On a device the shard passes through host
 * copies (ckpt_state). */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/checkpoint.h"
#include "kernels/device.h"
#include "src/train/trainer_internal.h"

/* What a checkpoint holds of this rank, on the host: its shard [begin, end)
 * of the fp32 parameters and of the two moments, [end - begin] each. On the
 * host the trainer's own buffers; on a device, host copies. */
typedef struct {
    float *params, *m, *v;
    int64_t begin, end;
    int copies;
} ckpt_state;

static size_t floats_bytes(int64_t count)
{
    return (size_t)(count > 0 ? count : 0) * sizeof(float);
}

/* bytes from the model's memory (t's queue) to the host, or back (to_host 0). */
static int copy_state(const trainer *t, void *dst, const void *src, size_t bytes, int to_host)
{
    if (!t->choices.on_device) return memcpy(dst, src, bytes), 0;
    bk_status st = to_host ? bk_device_download(&t->queue, dst, src, bytes)
                           : bk_device_upload(&t->queue, dst, src, bytes);
    return st == BK_OK ? 0 : -1;
}

/* Where this rank's shard of the fp32 parameters lives, in the state's memory:
 * the optimizer's masters (bf16 parameters, or zero = 3), else the range of
 * the parameters. */
static float *params_shard(trainer *t, int64_t begin)
{
    return t->params16 || trainer_zero_stage(t) == 3 ? zero_masters(t->opt) : t->params + begin;
}

/* s for t; with download, the device's values copied in. 0 or -1 with err. */
static int state_open(trainer *t, ckpt_state *s, int download, char *err, size_t err_len)
{
    int64_t begin, end;
    zero_shard(t->opt, &begin, &end);
    float *params = params_shard(t, begin), *m = zero_moment1(t->opt), *v = zero_moment2(t->opt);
    if (zero_state_on_host(t->opt)) {
        *s = (ckpt_state){params, m, v, begin, end, 0};
        return 0;
    }
    size_t bytes = floats_bytes(end - begin);
    *s = (ckpt_state){malloc(bytes ? bytes : 1),
                      malloc(bytes ? bytes : 1),
                      malloc(bytes ? bytes : 1),
                      begin,
                      end,
                      1};
    int failed = !s->params || !s->m || !s->v;
    if (!failed && download)
        failed = copy_state(t, s->params, params, bytes, 1) != 0 ||
                 copy_state(t, s->m, m, bytes, 1) != 0 || copy_state(t, s->v, v, bytes, 1) != 0;
    if (failed) snprintf(err, err_len, "cannot copy the model's state from the device");
    return failed ? -1 : 0;
}

/* Ends s; with upload, the moments (and with upload_params the parameters)
 * copied to the device first. 0 or -1 with err. */
static int state_close(trainer *t, ckpt_state *s, int upload, int upload_params, char *err,
                       size_t err_len)
{
    if (!s->copies) return 0;
    size_t bytes = floats_bytes(s->end - s->begin);
    int failed = 0;
    if (upload)
        failed =
            (upload_params && copy_state(t, params_shard(t, s->begin), s->params, bytes, 0) != 0) ||
            copy_state(t, zero_moment1(t->opt), s->m, bytes, 0) != 0 ||
            copy_state(t, zero_moment2(t->opt), s->v, bytes, 0) != 0;
    if (failed) snprintf(err, err_len, "cannot copy the checkpoint's state to the device");
    free(s->params), free(s->m), free(s->v);
    return failed ? -1 : 0;
}

/* After a phase: 1 when any rank failed; a rank that did not fail says why. */
static int phase_failed(trainer *t, int failed, int64_t step, char *err, size_t err_len)
{
    if (!trainer_any_rank(t, failed)) return 0;
    char what[64];
    snprintf(what, sizeof what, "checkpoint of step %lld", (long long)step);
    if (!failed) trainer_another_rank_failed(t, what, "failed on another rank", err, err_len);
    return 1;
}

int trainer_save_checkpoint(trainer *t, int64_t step, char *err, size_t err_len)
{
    train_config *c = &t->cfg;
    char *text = NULL;
    size_t text_len = 0;
    FILE *mem = open_memstream(&text, &text_len);
    train_config_print(mem, c);
    fclose(mem);
    io_ckpt_meta meta = {.step = step,
                         .sample_position = trainer_sample_index(c, step + 1, 0, 0),
                         .rng_state = c->data_seed, .world_size = t->world_size,
                         .n_params = t->model.n_params, .config_text = text};
    ckpt_state s;
    /* Every rank takes part in every agreement, whatever failed where. */
    int failed = state_open(t, &s, 1, err, err_len) != 0 ||
                 (t->rank == 0 && io_checkpoint_begin(c->checkpoint_dir, step, err, err_len) != 0);
    if (!phase_failed(t, failed, step, err, err_len))
        failed = io_checkpoint_write_rank(c->checkpoint_dir, step, t->rank, &meta, s.begin,
                                          s.end - s.begin, s.params, s.m, s.v, err, err_len) != 0;
    state_close(t, &s, 0, 0, err, err_len);
    if (!phase_failed(t, failed, step, err, err_len))
        failed = t->rank == 0 &&
                 io_checkpoint_commit(c->checkpoint_dir, step, c->keep_checkpoints, err, err_len) != 0;
    int any = trainer_any_rank(t, failed);
    free(text);
    return any ? -1 : 0;
}

/* Refuses a checkpoint this run would not continue bit for bit: one written
 * under a configuration that changes the numbers (config.h), or whose sampler
 * position or RNG state is not the one this configuration reaches after the
 * checkpoint's step (the sampler and the data RNG are functions of the step and
 * [data] data_seed, so restoring the step restores them; what the checkpoint
 * recorded must agree). */
static int check_resumable(const trainer *t, const io_ckpt_meta *meta, char *err, size_t err_len)
{
    const train_config *c = &t->cfg;
    char ck[256], name[300], why[512];
    snprintf(ck, sizeof ck, "%s/step-%lld", c->checkpoint_dir, (long long)meta->step);
    if (!meta->config_text || !meta->config_text[0]) {
        snprintf(err, err_len, "checkpoint %s records no configuration to compare with", ck);
        return -1;
    }
    train_config was;
    train_config_default(&was);
    snprintf(name, sizeof name, "%s/model.h5:/config", ck);
    if (train_config_load_text(&was, meta->config_text, name, why, sizeof why) != 0) {
        snprintf(err, err_len, "checkpoint %s: its configuration does not load: %s", ck, why);
        return -1;
    }
    if (train_config_resume_check(&was, c, why, sizeof why) != 0) {
        snprintf(err, err_len, "checkpoint %s was written with %s", ck, why);
        return -1;
    }
    int64_t next = trainer_sample_index(c, meta->step + 1, 0, 0);
    if (meta->sample_position != next) {
        snprintf(err, err_len,
                 "checkpoint %s: sample_position = %lld, this run continues at sample %lld", ck,
                 (long long)meta->sample_position, (long long)next);
        return -1;
    }
    if (meta->rng_state != c->data_seed) {
        snprintf(err, err_len,
                 "checkpoint %s: rng_state = %llu, this run has [data] data_seed = %llu", ck,
                 (unsigned long long)meta->rng_state, (unsigned long long)c->data_seed);
        return -1;
    }
    return 0;
}

int trainer_checkpoint_zero_stage(const trainer *t)
{
    const char *dir = t->cfg.checkpoint_dir;
    char err[512];
    io_ckpt_meta meta;
    memset(&meta, 0, sizeof meta);
    int64_t step = io_checkpoint_latest(dir, err, sizeof err);
    if (step < 0 || io_checkpoint_read_model(dir, step, NULL, &meta, NULL, err, sizeof err) != 0)
        return 0;
    train_config was;
    train_config_default(&was);
    int stage = train_config_load_text(&was, meta.config_text, dir, err, sizeof err) == 0
                    ? train_config_zero_stage(&was)
                    : 0;
    free((char *)meta.config_text);
    return stage;
}

/* zero = 1 or 2: the parameters whole on every rank, read from every shard
 * (and with bf16 parameters, the optimizer's masters from them). */
static int load_whole_params(trainer *t, int64_t step, const io_ckpt_meta *expect, char *err,
                             size_t err_len)
{
    size_t bytes = floats_bytes(t->model.n_params);
    int in_place = !t->choices.on_device && !t->params16;
    float *full = in_place ? t->params : malloc(bytes ? bytes : 1);
    if (!full) {
        snprintf(err, err_len, "cannot allocate %zu bytes to read the checkpoint's parameters",
                 bytes);
        return -1;
    }
    int failed = io_checkpoint_read_model(t->cfg.checkpoint_dir, step, expect, NULL, full, err,
                                          err_len) != 0;
    if (!failed && !in_place) {
        failed = t->params16 ? zero_set_params(t->opt, full, t->params16) != 0
                             : copy_state(t, t->params, full, bytes, 0) != 0;
        if (failed) snprintf(err, err_len, "cannot copy the checkpoint's parameters to the device");
    }
    if (!in_place) free(full);
    return failed ? -1 : 0;
}

int64_t trainer_load_checkpoint(trainer *t, char *err, size_t err_len)
{
    train_config *c = &t->cfg;
    int64_t step = io_checkpoint_latest(c->checkpoint_dir, err, err_len);
    int failed = step < 0;
    io_ckpt_meta expect = {.world_size = t->world_size, .n_params = t->model.n_params}, meta;
    memset(&meta, 0, sizeof meta);
    /* The metadata first, so that a different configuration is named before
     * the parameter count or the world size would differ. */
    if (!failed)
        failed = io_checkpoint_read_model(c->checkpoint_dir, step, NULL, &meta, NULL, err,
                                          err_len) != 0 ||
                 check_resumable(t, &meta, err, err_len) != 0 ||
                 io_checkpoint_read_model(c->checkpoint_dir, step, &expect, NULL, NULL, err,
                                          err_len) != 0;
    /* zero = 3 takes its shard of the parameters alone, the others them all */
    int own_shard = trainer_zero_stage(t) == 3;
    ckpt_state s = {0};
    int opened = !failed && state_open(t, &s, 0, err, err_len) == 0;
    failed |= !opened;
    if (!failed)
        failed =
            io_checkpoint_read_rank(c->checkpoint_dir, step, t->rank, s.begin, s.end - s.begin,
                                    own_shard ? s.params : NULL, s.m, s.v, err, err_len) != 0 ||
            (!own_shard && load_whole_params(t, step, &expect, err, err_len) != 0);
    if (opened) failed |= state_close(t, &s, !failed, own_shard, err, err_len) != 0;
    free((char *)meta.config_text);
    if (trainer_any_rank(t, failed)) {
        if (!failed)
            trainer_another_rank_failed(t, "checkpoint", "another rank could not load it", err,
                                        err_len);
        return -1;
    }
    return step;
}
