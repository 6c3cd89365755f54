/* plan_fit.h: the cluster `burst plan memory` and `burst plan time` describe
 * on the command line, and whether a configuration's rank fits in it, as the
 * run itself decides at setup. */
#ifndef BURST_CLI_PLAN_FIT_H
#define BURST_CLI_PLAN_FIT_H

#include <stddef.h>
#include <stdint.h>

#include "src/plan/profile.h"
#include "src/train/choices.h"
#include "src/train/trainer_memory.h"

typedef struct {
    int ranks, per_node;  /* the job's ranks, ranks (GPUs) per node */
    int64_t device_bytes; /* one GPU's memory */
    int64_t host_bytes;   /* one node's memory for the ranks */
} plan_cluster;

/* The options that describe the cluster, rows of a bu_option table whose
 * settings struct `type` holds a plan_cluster `field`. */
#define PLAN_CLUSTER_OPTIONS(type, field)                                                          \
    {"--ranks", "N",     BU_OPT_INT, offsetof(type, field.ranks),                                  \
     1,         1 << 20, NULL,       "ranks of the job (default: [parallel] dp x cp)"},            \
        {"--gpus-per-node",                                                                        \
         "G",                                                                                      \
         BU_OPT_INT,                                                                               \
         offsetof(type, field.per_node),                                                           \
         1,                                                                                        \
         1 << 20,                                                                                  \
         NULL,                                                                                     \
         "ranks (GPUs) per node (default: all ranks on one node)"},                                \
        {"--device-memory",                                                                        \
         "SIZE",                                                                                   \
         BU_OPT_BYTES,                                                                             \
         offsetof(type, field.device_bytes),                                                       \
         1,                                                                                        \
         9.2e18,                                                                                   \
         NULL,                                                                                     \
         "one GPU's memory (default 80G; G means GiB)"},                                           \
    {                                                                                              \
        "--host-memory", "SIZE", BU_OPT_BYTES, offsetof(type, field.host_bytes), 1, 9.2e18, NULL,  \
            "one node's memory for the ranks (default: this machine's\n"                           \
            "available memory)"                                                                    \
    }

/* The device profiles a plan is priced with (--profile FILE, repeatable). */
enum { PLAN_MAX_PROFILES = 8 };
typedef struct {
    const char *files[PLAN_MAX_PROFILES];
    int n;
} plan_profile_files;
/* One more file: 0, or -1 when there are PLAN_MAX_PROFILES already. */
int plan_profile_files_add(plan_profile_files *f, const char *path);
/* Every file's rows into p (zeroed): 0, or -1 after printing the error
 * under cmd's name. */
int plan_profile_files_load(const plan_profile_files *f, plan_profile *p, const char *cmd);

/* What the command line left at 0: ranks dp x cp, all on one node, this
 * machine's available memory for a node's. */
void plan_cluster_defaults(plan_cluster *k, const train_config *cfg);

/* The verdict for cfg: 1 fits, 0 does not, -1 a configuration the run
 * refuses (err). With zero, attn_kept_fraction or keep_layers = auto, for
 * the first of choose_memory_candidates that fits (the run's own order),
 * else for the last; *chosen gets its values and *p its count. */
int plan_fits(const plan_cluster *k, const train_config *cfg, trainer_memory_plan *p,
              memory_choice *chosen, char *err, size_t err_len);

#endif
