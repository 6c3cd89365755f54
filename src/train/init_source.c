/* init_source.c: see init_source.h. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "io/checkpoint.h"
#include "src/train/hf_model.h"
#include "src/train/init_source.h"

model_dims model_dims_of(const train_config *c)
{
    return (model_dims){.layers = c->layers,
                        .d_model = c->d_model,
                        .n_heads = c->n_heads,
                        .n_kv_heads = c->n_kv_heads,
                        .head_dim = c->d_model / c->n_heads,
                        .d_ff = c->d_ff,
                        .vocab = c->vocab,
                        .tied = c->tied_embeddings,
                        .rope = train_config_rope(c),
                        .norm_eps = (float)c->norm_eps};
}

static int is_file(const char *dir, const char *name)
{
    char p[PATH_MAX];
    struct stat sb;
    return snprintf(p, sizeof p, "%s/%s", dir, name) < (int)sizeof p && stat(p, &sb) == 0 &&
           S_ISREG(sb.st_mode);
}

/* path = DIR/step-S holding model.h5: DIR and S. */
static int step_folder(const char *path, init_source *s)
{
    char copy[PATH_MAX];
    snprintf(copy, sizeof copy, "%s", path);
    size_t n = strlen(copy);
    while (n > 1 && copy[n - 1] == '/') copy[--n] = '\0';
    char *slash = strrchr(copy, '/'), *base = slash ? slash + 1 : copy;
    char tail;
    if (!is_file(path, "model.h5") || sscanf(base, "step-%" SCNd64 "%c", &s->step, &tail) != 1)
        return -1;
    if (!slash)
        snprintf(s->dir, sizeof s->dir, ".");
    else if (slash == copy)
        snprintf(s->dir, sizeof s->dir, "/");
    else
        *slash = '\0', snprintf(s->dir, sizeof s->dir, "%s", copy);
    return 0;
}

int init_source_open(const char *path, init_source *s, char *err, size_t err_len)
{
    memset(s, 0, sizeof *s);
    if (snprintf(s->path, sizeof s->path, "%s", path) >= (int)sizeof s->path) {
        snprintf(err, err_len, "%s: path too long", path);
        return -1;
    }
    if (hf_is_model_dir(path)) {
        s->kind = INIT_HF;
        return 0;
    }
    s->kind = INIT_BURST;
    if (step_folder(path, s) == 0) return 0;
    if (is_file(path, "latest")) {
        snprintf(s->dir, sizeof s->dir, "%s", path);
        s->step = io_checkpoint_latest(path, err, err_len);
        return s->step < 0 ? -1 : 0;
    }
    snprintf(err, err_len,
             "%s: neither a burst checkpoint (latest, or step-S/model.h5) nor a Hugging Face "
             "model folder (config.json)",
             path);
    return -1;
}

static int hf_source_config(const init_source *s, train_config *out, int64_t *max_positions,
                            char *err, size_t err_len)
{
    hf_config h;
    if (hf_config_read(s->path, &h, err, err_len) != 0) return -1;
    const model_dims *d = &h.dims;
    out->layers = d->layers;
    out->d_model = d->d_model;
    out->n_heads = d->n_heads;
    out->n_kv_heads = d->n_kv_heads;
    out->d_ff = d->d_ff;
    out->vocab = d->vocab;
    out->tied_embeddings = d->tied;
    train_config_set_rope(out, &d->rope);
    out->norm_eps = h.norm_eps;
    if (max_positions) *max_positions = h.max_positions;
    return 0;
}

static int burst_source_config(const init_source *s, train_config *out, char *err, size_t err_len)
{
    io_ckpt_meta meta;
    memset(&meta, 0, sizeof meta);
    if (io_checkpoint_read_model(s->dir, s->step, NULL, &meta, NULL, err, err_len) != 0) return -1;
    char name[PATH_MAX + 64];
    snprintf(name, sizeof name, "%s/step-%" PRId64 "/model.h5 (its configuration)", s->dir,
             s->step);
    train_config was;
    train_config_default(&was);
    int rc = train_config_load_text(&was, meta.config_text, name, err, err_len);
    free((char *)meta.config_text);
    if (rc != 0) return -1;
    /* its model, and nothing else of it: out given nothing takes every model key */
    memset(out->given, 0, sizeof out->given);
    return train_config_take_model(out, &was, name, err, err_len);
}

int init_source_config(const init_source *s, const train_config *base, train_config *out,
                       int64_t *max_positions, char *err, size_t err_len)
{
    *out = *base;
    if (max_positions) *max_positions = 0;
    return s->kind == INIT_HF ? hf_source_config(s, out, max_positions, err, err_len)
                              : burst_source_config(s, out, err, err_len);
}

int init_source_params(const init_source *s, const model_layout *m, float *params, char *err,
                       size_t err_len)
{
    return init_source_params_range(s, m, 0, m->n_params, params, err, err_len);
}

int init_source_params_range(const init_source *s, const model_layout *m, int64_t begin,
                             int64_t end, float *out, char *err, size_t err_len)
{
    if (s->kind == INIT_HF) return hf_weights_read_range(s->path, m, begin, end, out, err, err_len);
    io_ckpt_meta expect = {.n_params = m->n_params}; /* the shape, whatever the range */
    return io_checkpoint_read_params(s->dir, s->step, &expect, begin, end - begin, out, err,
                                     err_len);
}

int init_source_take_model(train_config *c, char *err, size_t err_len)
{
    if (!c->init_from[0]) return 0;
    init_source s;
    train_config src;
    char why[1024];
    if (init_source_open(c->init_from, &s, why, sizeof why) != 0 ||
        init_source_config(&s, c, &src, NULL, why, sizeof why) != 0 ||
        train_config_take_model(c, &src, c->init_from, why, sizeof why) != 0) {
        snprintf(err, err_len, "[model] init_from: %s", why);
        return -1;
    }
    return 0;
}
