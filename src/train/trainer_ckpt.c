/* trainer_ckpt.c: checkpoints of the run (trainer.h) through io/checkpoint.h.
 * Saving is three collective phases: rank 0 opens the step's directory, every
 * rank writes its part (the model on rank 0, each rank's optimizer shard),
 * rank 0 commits; ranks agree after each phase, so a failure anywhere leaves
 * the previous checkpoint whole and every rank stops. Resuming refuses a
 * checkpoint whose configuration, sampler position or RNG state this run would
 * not continue, naming the key and both values. On a device the parameters
 * and moments pass through host copies (ckpt_state). A checkpoint always
 * holds the fp32 parameters: with bf16 parameters, the optimizer's masters
 * gathered, and on loading each rank takes its masters from them. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/checkpoint.h"
#include "kernels/device.h"
#include "src/train/trainer.h"

int trainer_failed_rank(trainer *t, int failed)
{
    int64_t first = failed ? t->rank : INT64_MAX;
    if (bt_allreduce(bt_world_comm(t->world), &first, 1, BT_I64, BT_MIN) != BT_OK) return t->rank;
    return first == INT64_MAX ? -1 : (int)first;
}

int trainer_any_rank(trainer *t, int failed)
{
    return trainer_failed_rank(t, failed) >= 0;
}

/* What a checkpoint holds of this rank, on the host: the parameters
 * [n_params] and the moments of the shard [end - begin] each. On the host the
 * trainer's own buffers; on a device, host copies. */
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

/* s for t; with download, the device's values copied in. 0 or -1 with err.
 * The parameters are read in place on the host; from the device, or from
 * the optimizer's masters (bf16 parameters, zero = 3), they are copied. */
static int state_open(trainer *t, ckpt_state *s, int download, char *err, size_t err_len)
{
    zero1_shard(t->opt, &s->begin, &s->end);
    s->copies = t->choices.on_device || t->param_windows;
    if (!s->copies) {
        *s = (ckpt_state){t->params, zero1_moment1(t->opt), zero1_moment2(t->opt), s->begin, s->end, 0};
        return 0;
    }
    size_t pb = floats_bytes(t->model.n_params), mb = floats_bytes(s->end - s->begin);
    s->params = malloc(pb ? pb : 1), s->m = malloc(mb ? mb : 1), s->v = malloc(mb ? mb : 1);
    int failed = !s->params || !s->m || !s->v, masters = t->params16 || t->param_windows;
    /* collective: every rank takes part, with its buffer or without */
    if (download && masters) failed |= zero1_gather_params(t->opt, s->params) != BT_OK;
    if (!failed && download)
        failed = (!masters && copy_state(t, s->params, t->params, pb, 1) != 0) ||
                 copy_state(t, s->m, zero1_moment1(t->opt), mb, 1) != 0 ||
                 copy_state(t, s->v, zero1_moment2(t->opt), mb, 1) != 0;
    if (failed) snprintf(err, err_len, "cannot copy the model's state from the device");
    return failed ? -1 : 0;
}

/* Ends s; with upload, its values copied to the device first. 0 or -1 with err. */
static int state_close(trainer *t, ckpt_state *s, int upload, char *err, size_t err_len)
{
    if (!s->copies) return 0;
    size_t pb = floats_bytes(t->model.n_params), mb = floats_bytes(s->end - s->begin);
    int failed = 0;
    if (upload)
        failed =
            (t->params16 || t->param_windows ? zero1_set_params(t->opt, s->params, t->params16) != 0
                                             : copy_state(t, t->params, s->params, pb, 0) != 0) ||
            copy_state(t, zero1_moment1(t->opt), s->m, mb, 0) != 0 ||
            copy_state(t, zero1_moment2(t->opt), s->v, mb, 0) != 0;
    if (failed) snprintf(err, err_len, "cannot copy the checkpoint's state to the device");
    free(s->params), free(s->m), free(s->v);
    return failed ? -1 : 0;
}

/* After a phase: 1 when any rank failed; a rank that did not fail says why. */
static int phase_failed(trainer *t, int failed, int64_t step, char *err, size_t err_len)
{
    if (!trainer_any_rank(t, failed)) return 0;
    if (!failed) snprintf(err, err_len, "checkpoint of step %lld failed on another rank", (long long)step);
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
        failed = io_checkpoint_write_rank(c->checkpoint_dir, step, t->rank, &meta, s.params,
                                          s.begin, s.end - s.begin, s.m, s.v, err, err_len) != 0;
    state_close(t, &s, 0, err, err_len);
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
                 check_resumable(t, &meta, err, err_len) != 0;
    ckpt_state s = {0};
    int opened = !failed && state_open(t, &s, 0, err, err_len) == 0;
    failed |= !opened;
    if (!failed)
        failed = io_checkpoint_read_model(c->checkpoint_dir, step, &expect, NULL, s.params, err,
                                          err_len) != 0;
    if (!failed)
        failed = io_checkpoint_read_rank(c->checkpoint_dir, step, t->rank, s.begin, s.end - s.begin,
                                         s.m, s.v, err, err_len) != 0;
    if (opened) failed |= state_close(t, &s, !failed, err, err_len) != 0;
    free((char *)meta.config_text);
    if (trainer_any_rank(t, failed)) {
        if (!failed) snprintf(err, err_len, "another rank could not load the checkpoint");
        return -1;
    }
    return step;
}
