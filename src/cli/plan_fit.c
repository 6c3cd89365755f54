/* plan_fit.c: a rank's memory against the cluster's (plan_fit.h). */
#include "src/cli/plan_fit.h"

#include <stdio.h>
#include <string.h>

#include "util/proc_memory.h"

int plan_profile_files_add(plan_profile_files *f, const char *path)
{
    if (f->n == PLAN_MAX_PROFILES) return -1;
    f->files[f->n++] = path;
    return 0;
}

int plan_profile_files_load(const plan_profile_files *f, plan_profile *p, const char *cmd)
{
    char err[512];
    memset(p, 0, sizeof *p);
    for (int i = 0; i < f->n; i++)
        if (plan_profile_load(p, f->files[i], err, sizeof err) != 0) {
            fprintf(stderr, "%s: %s\n", cmd, err);
            plan_profile_free(p);
            return -1;
        }
    return 0;
}

void plan_cluster_defaults(plan_cluster *k, const train_config *cfg)
{
    if (k->ranks == 0) k->ranks = cfg->dp * cfg->cp;
    if (k->per_node == 0 || k->per_node > k->ranks) k->per_node = k->ranks;
    if (k->host_bytes == 0) {
        double avail = bu_available_bytes();
        k->host_bytes = avail > 0 ? (int64_t)avail : (int64_t)1 << 40;
    }
}

/* The verdict for cfg at its ZeRO stage, as plan_fits. */
static int fits_at_stage(const plan_cluster *k, const train_config *cfg, trainer_memory_plan *p,
                         char *err, size_t err_len)
{
    if (trainer_plan_offline(cfg, k->ranks, k->ranks / k->per_node, p, err, err_len) != 0)
        return -1;
    /* what trainer_check_memory compares, with the arena's margin on a device
     * (trainer_make_arena takes the two together) */
    int on_device = p->on_device;
    double need[MEMORY_KINDS],
        room[MEMORY_KINDS] = {cfg->limit_bytes > 0 ? (double)cfg->limit_bytes : -1,
                              on_device ? (double)k->device_bytes : -1,
                              (double)k->host_bytes / k->per_node};
    trainer_memory_needs(&p->mem, on_device, need);
    if (on_device) need[MEMORY_DEVICE] = (double)(trainer_arena_bytes(&p->mem) + p->mem.nccl);
    return trainer_memory_verdict(need, room) < 0;
}

int plan_fits(const plan_cluster *k, const train_config *cfg, trainer_memory_plan *p,
              memory_choice *chosen, char *err, size_t err_len)
{
    bk_attn_mask mask = choose_mask(cfg->mask, cfg->window);
    memory_choice list[MEMORY_CHOICES_MAX];
    int n = choose_memory_candidates(
        train_config_zero_stage(cfg), train_config_lowest_zero_stage(cfg), cfg->attn_kept_fraction,
        cfg->keep_layers, keep_half_allowed(choose_layout(cfg->layout, cfg->mask), &mask), list);
    train_config c = *cfg;
    int ok = -1;
    for (int i = 0; i < n; i++) {
        memory_choice_apply(&list[i], &c);
        *chosen = list[i];
        ok = fits_at_stage(k, &c, p, err, err_len);
        if (ok != 0) return ok;
    }
    return ok;
}
