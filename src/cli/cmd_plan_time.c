/* cmd_plan_time.c: `burst plan time`: how long a step of a training
 * configuration will take on a cluster described on the command line and in
 * device profiles, part by part (src/plan/step_time.h), without starting any
 * rank; with --sweep, the same for each value of one key, ranked. The memory
 * choices left to auto are made as the run makes them (plan_fits), so the
 * step priced is the step the run would take. */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "src/cli/cli.h"
#include "src/cli/plan_fit.h"
#include "src/plan/step_time.h"
#include "util/options.h"

enum { MAX_SWEEP = 16 };

/* What the command line sets; the configuration first (cli_config_ref). */
typedef struct {
    cli_config_ref config;
    train_config cfg;
    plan_cluster cluster;
    plan_profile_files profiles;
    const char *sweep;
} time_args;

static int add_profile(void *a, const char *v)
{
    return plan_profile_files_add(&((time_args *)a)->profiles, v);
}

static int set_sweep(void *a, const char *v)
{
    const char *eq = strchr(v, '=');
    if (!eq || eq == v || !eq[1] || !strchr(v, '.')) return -1;
    ((time_args *)a)->sweep = v;
    return 0;
}

static const bu_option options[] = {
    {"--config", "FILE", BU_OPT_CUSTOM, 0, 0, 0, cli_set_config_file,
     "the configuration, as `burst train` takes it"},
    {"--set", "S.K=V", BU_OPT_CUSTOM, 0, 0, 0, cli_set_config_key,
     "one key after the file (repeatable, in order)"},
    {"--profile", "FILE", BU_OPT_CUSTOM, 0, 0, 0, add_profile,
     "a device profile (repeatable: the files' rows together; the\n"
     "project's are in profiles/)"},
    {"--sweep", "S.K=V1,V2", BU_OPT_CUSTOM, 0, 0, 0, set_sweep,
     "the same for each value of one key, side by side, fastest\n"
     "first; those that do not fit memory are refused"},
    PLAN_CLUSTER_OPTIONS(time_args, cluster),
};
enum { N_OPTIONS = sizeof options / sizeof options[0] };

static void usage(FILE *out)
{
    fprintf(out,
            "usage: burst plan time --profile FILE [--profile FILE ...] [--config FILE]\n"
            "                       [--set section.key=value ...] [--ranks N] [--gpus-per-node G]\n"
            "                       [--sweep section.key=V1,V2,...]\n\n"
            "Prices one step of `burst train` with this configuration on a cluster, from a\n"
            "device profile's measured or derived rates, without starting any rank: per layer\n"
            "the products, the forward, recompute and backward rings (each ring step and each\n"
            "hop of its schedule, overlapped as the ring executor overlaps them), the passes\n"
            "over memory; per step the head, the optimizer and ZeRO's collectives. Prints\n"
            "compute, communication and exposed communication of each part, the step time,\n"
            "tokens/s per rank, the MFU (the trainer's causal-correct FLOPs over the\n"
            "profile's peak) and the bottleneck. Memory choices left to auto are made as the\n"
            "run makes them. A rate the profile lacks is an error naming its row.\n\n");
    bu_options_print(out, options, N_OPTIONS, 23);
    fprintf(out, "\nExit status: 0 priced (and it fits), 2 a bad configuration, profile or a\n"
                 "configuration that does not fit (every value of a sweep).\n");
}

/* One configuration priced: 1 priced and fits, 0 priced but does not fit,
 * -1 refused (err). */
typedef struct {
    char value[64];
    int fits;
    memory_choice chosen;
    trainer_step_plan plan;
    step_time time;
} priced;

static int price(const time_args *a, const plan_profile *prof, const train_config *cfg, priced *out,
                 char *err, size_t err_len)
{
    trainer_memory_plan mp;
    out->fits = plan_fits(&a->cluster, cfg, &mp, &out->chosen, err, err_len);
    if (out->fits < 0) return -1;
    train_config c = *cfg;
    memory_choice_apply(&out->chosen, &c);
    if (trainer_plan_step_offline(&c, a->cluster.ranks, a->cluster.ranks / a->cluster.per_node,
                                  &out->plan, err, err_len) != 0)
        return -1;
    int per_node = a->cluster.per_node;
    if (step_time_price(&out->plan, prof, per_node, &out->time, err, err_len) != 0) {
        trainer_step_plan_free(&out->plan);
        return -1;
    }
    return out->fits;
}

static void print_part(const step_part *p, double scale)
{
    printf("  %-22s %10.4f %10.4f %10.4f %10.4f\n", p->name, scale * p->compute_s,
           scale * p->comm_s, scale * p->exposed_s, scale * (p->compute_s + p->exposed_s));
}

static void report(const time_args *a, const plan_profile *prof, const priced *x)
{
    const train_config *c = &a->cfg;
    const trainer_step_plan *t = &x->plan;
    const step_time *s = &x->time;
    printf("plan time: %s, %d ranks = dp %d x cp %d, %d per node, ZeRO stage %d; sequence %lld "
           "tokens (%lld per rank), %d micro-batch%s; %s\n",
           train_config_name("model", "preset", c->preset), t->ranks, t->dp, t->cp,
           a->cluster.per_node, t->memory.zero_stage, (long long)c->seq_len,
           (long long)t->memory.tokens_per_rank, t->micro_batches,
           t->micro_batches == 1 ? "" : "es",
           t->memory.on_device ? "a GPU per rank" : "on the CPU");
    printf("kept for the backward: attention outputs %g, layers %s; %s, %s ring\n",
           x->chosen.kept_fraction, x->chosen.keep_layers ? "kept" : "recomputed",
           ring_pass_name(t->rings.bwd->pass),
           t->rings.fwd->topo == TOPO_DOUBLE ? "double" : "flat");
    printf("profile: %s (%s)\n", prof->name, prof->device);
    printf("per layer and micro-batch (the rings' slowest rank, %d):\n", s->ring[0].rank);
    printf("  %-22s %10s %10s %10s %10s\n", "part", "compute s", "comm s", "exposed s", "time s");
    for (int i = 0; i < LAYER_PARTS; i++)
        if (i != PART_ATTN_RECOMPUTE || t->keep != KEEP_ALL) print_part(&s->part[i], 1);
    printf("  %-22s %43.4f\n", "layer", s->layer_s);
    printf("per step:\n");
    for (int i = PART_LAYERS; i < STEP_PARTS; i++) print_part(&s->part[i], 1);
    printf("step time %.4g s; %.1f tokens/s per rank; MFU %.1f%% (the trainer's causal-correct "
           "FLOPs over %d x the profile's peak)\n",
           s->step_s, s->tokens_per_s_per_rank, 100.0 * s->mfu, t->ranks);
    printf("bottleneck: %s\n", s->bottleneck);
    if (!x->fits) printf("fits: no (burst plan memory says which part)\n");
}

static int by_step_time(const void *pa, const void *pb)
{
    const priced *a = pa, *b = pb;
    if (a->fits != b->fits) return b->fits - a->fits; /* those that fit first */
    return (a->time.step_s > b->time.step_s) - (a->time.step_s < b->time.step_s);
}

/* --sweep: each value priced, then the table, fastest first. */
static int sweep(const time_args *a, const plan_profile *prof)
{
    const char *eq = strchr(a->sweep, '=');
    char key[128], values[1024];
    snprintf(key, sizeof key, "%.*s", (int)(eq - a->sweep), a->sweep);
    snprintf(values, sizeof values, "%s", eq + 1);
    priced *list = calloc(MAX_SWEEP, sizeof *list);
    int n = 0, status = 0, any_fits = 0;
    char err[512];
    for (char *save = NULL, *v = strtok_r(values, ",", &save); list && v && status == 0;
         v = strtok_r(NULL, ",", &save)) {
        char set[256];
        train_config c = a->cfg;
        snprintf(set, sizeof set, "%s=%s", key, v);
        if (n == MAX_SWEEP) {
            fprintf(stderr, "burst plan time: --sweep takes at most %d values\n", MAX_SWEEP);
            status = EXIT_USAGE;
        } else if (train_config_set(&c, set, err, sizeof err) != 0 ||
                   price(a, prof, &c, &list[n], err, sizeof err) < 0) {
            fprintf(stderr, "burst plan time: %s: %s\n", set, err);
            status = EXIT_USAGE;
        } else {
            snprintf(list[n].value, sizeof list[n].value, "%s", v);
            any_fits |= list[n++].fits;
        }
    }
    if (!list) status = EXIT_RUN_FAILURE;
    if (status == 0) {
        qsort(list, (size_t)n, sizeof *list, by_step_time);
        printf("plan time: %s swept, fastest first; profile %s\n", key, prof->name);
        printf("%-14s %10s %12s %8s %10s %10s  %s\n", "value", "step s", "tokens/s/rk", "MFU",
               "exposed s", "kept", "bottleneck");
        for (int i = 0; i < n; i++) {
            const step_time *s = &list[i].time;
            double exposed = s->part[PART_LAYERS].exposed_s + s->part[PART_COLLECTIVES].exposed_s;
            if (!list[i].fits) {
                printf("%-14s does not fit memory (burst plan memory --set %s=%s)\n", list[i].value,
                       key, list[i].value);
                continue;
            }
            printf("%-14s %10.4g %12.1f %7.1f%% %10.4g %4g,%-5s  %s\n", list[i].value, s->step_s,
                   s->tokens_per_s_per_rank, 100 * s->mfu, exposed, list[i].chosen.kept_fraction,
                   list[i].chosen.keep_layers ? "kept" : "recomp", s->bottleneck);
        }
        if (!any_fits) status = EXIT_USAGE;
    }
    for (int i = 0; list && i < n; i++) trainer_step_plan_free(&list[i].plan);
    free(list);
    return status;
}

int cmd_plan_time(int argc, char **argv)
{
    time_args a = {.cluster.device_bytes = (int64_t)80 << 30};
    train_config_default(&a.cfg);
    a.config = (cli_config_ref){&a.cfg, "burst plan time"};
    int parsed = bu_options_parse("burst plan time", options, N_OPTIONS, argc, argv, &a, NULL);
    if (parsed == 1) usage(stdout);
    if (parsed != 0) return parsed == 1 ? 0 : EXIT_USAGE;
    if (a.profiles.n == 0) {
        fprintf(stderr, "burst plan time: give the device's rates with --profile FILE (the "
                        "project's are in profiles/; `burst bench kernels --profile-out FILE` "
                        "measures one)\n");
        return EXIT_USAGE;
    }
    plan_cluster_defaults(&a.cluster, &a.cfg);
    plan_profile prof;
    char err[512];
    int status = plan_profile_files_load(&a.profiles, &prof, "burst plan time") ? EXIT_USAGE : 0;
    if (status == 0 && a.sweep) {
        status = sweep(&a, &prof);
    } else if (status == 0) {
        priced x;
        int ok = price(&a, &prof, &a.cfg, &x, err, sizeof err);
        if (ok < 0) {
            fprintf(stderr, "burst plan time: %s\n", err);
            status = EXIT_USAGE;
        } else {
            report(&a, &prof, &x);
            trainer_step_plan_free(&x.plan);
            status = ok ? 0 : EXIT_USAGE;
        }
    }
    plan_profile_free(&prof);
    return status;
}
