/* init_source.h: the weights a run starts from ([model] init_from) and the
 * folders `burst convert` reads: a burst checkpoint (its folder, whose latest
 * names the step, or one step-S folder of it) or a Hugging Face model folder
 * (config.json). Only the parameters are taken; optimizer state and step
 * start afresh. */
#ifndef BURST_TRAIN_INIT_SOURCE_H
#define BURST_TRAIN_INIT_SOURCE_H

#include <limits.h>
#include <stddef.h>
#include <stdint.h>

#include "src/train/config.h"
#include "src/train/model.h"

typedef enum { INIT_BURST, INIT_HF } init_kind;

typedef struct {
    init_kind kind;
    char path[PATH_MAX]; /* as given */
    char dir[PATH_MAX];  /* burst: the checkpoint folder */
    int64_t step;        /* burst: the step of dir/step-S */
} init_source;

/* The model dimensions a configuration gives. */
model_dims model_dims_of(const train_config *c);

/* Finds what path is. 0, or -1 with err naming path. */
int init_source_open(const char *path, init_source *s, char *err, size_t err_len);
/* The source's configuration: base with the source's [model] keys (a burst
 * checkpoint's own configuration, or config.json's model). For a Hugging Face
 * folder, *max_positions is its max_position_embeddings (0 for a checkpoint;
 * may be NULL). */
int init_source_config(const init_source *s, const train_config *base, train_config *out,
                       int64_t *max_positions, char *err, size_t err_len);
/* The source's parameters [m->n_params], fp32 on the host; refused when they
 * are not of m's shape. */
int init_source_params(const init_source *s, const model_layout *m, float *params, char *err,
                       size_t err_len);
/* The same for the parameters [begin, end) alone, into out [end - begin]:
 * what a rank of zero = 3 holds, read without the whole model. */
int init_source_params_range(const init_source *s, const model_layout *m, int64_t begin,
                             int64_t end, float *out, char *err, size_t err_len);
/* [model] init_from applied to c: its model keys taken (train_config_take_model).
 * Nothing to do without init_from. */
int init_source_take_model(train_config *c, char *err, size_t err_len);

#endif
