/* cmd_plan_memory.c: `burst plan memory`: the memory one rank of a training
 * run needs, part by part, on a cluster described on the command line,
 * without starting any rank: the count trainer_setup makes
 * (trainer_plan_offline), compared as the run compares it (on a device the
 * device parts with their arena's margin against one GPU's memory, on the CPU
 * the whole against a node's share; [memory] limit_bytes either way), and the
 * largest sequence of the form 2^k x 2 cp that fits. */
#include <jansson.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "src/cli/cli.h"
#include "src/cli/plan_fit.h"
#include "src/train/choices.h"
#include "src/train/trainer_memory.h"
#include "util/options.h"
#include "util/parse.h"

/* What the command line sets; the configuration first (cli_config_ref). */
typedef struct {
    cli_config_ref config;
    train_config cfg;
    plan_cluster cluster;
    int json;
} plan_args;

static const bu_option options[] = {
    {"--config", "FILE", BU_OPT_CUSTOM, 0, 0, 0, cli_set_config_file,
     "the configuration, as `burst train` takes it"},
    {"--set", "S.K=V", BU_OPT_CUSTOM, 0, 0, 0, cli_set_config_key,
     "one key after the file (repeatable, in order)"},
    PLAN_CLUSTER_OPTIONS(plan_args, cluster),
    {"--json", NULL, BU_OPT_FLAG, offsetof(plan_args, json), 0, 0, NULL,
     "the same as one JSON object on stdout, bytes exact"},
};
enum { N_OPTIONS = sizeof options / sizeof options[0] };

static void usage(FILE *out)
{
    fprintf(out,
            "usage: burst plan memory [--config FILE] [--set section.key=value ...] [--ranks N]\n"
            "                         [--gpus-per-node G] [--device-memory SIZE] [--host-memory "
            "SIZE]\n"
            "                         [--json]\n\n"
            "Counts what one rank of `burst train` with this configuration needs, part by part,\n"
            "as the run itself counts it at setup, without starting any rank, and says whether\n"
            "it fits, as the run decides: on a device ([train] device = cuda) the device parts,\n"
            "the arena's margin and NCCL's own buffers (estimated from NCCL_BUFFSIZE and\n"
            "NCCL_MAX_NCHANNELS as set here, on nodes of several ranks unless [transport]\n"
            "intra = ucx) against one GPU's memory, each rank driving a GPU of its own; on\n"
            "the CPU the whole against a node's memory shared by its ranks; and\n"
            "[memory] limit_bytes either way. Then the longest sequence 2^k x 2 cp that fits.\n\n");
    bu_options_print(out, options, N_OPTIONS, 23);
    fprintf(out, "\nExit status: 0 it fits, 2 it does not (or a bad configuration).\n");
}

/* 0 to go on, or an exit status (-1 after --help). */
static int parse_args(int argc, char **argv, plan_args *a)
{
    a->config = (cli_config_ref){&a->cfg, "burst plan memory"};
    int parsed = bu_options_parse("burst plan memory", options, N_OPTIONS, argc, argv, a, NULL);
    if (parsed == 1) usage(stdout);
    return parsed == 0 ? 0 : parsed == 1 ? -1 : EXIT_USAGE;
}

/* The longest sequence 2^k x unit that fits with everything else as given
 * (unit: what the layout needs of a length on cp ranks), or 0. */
static int64_t longest_fitting(const plan_args *a)
{
    int64_t unit = 2 * (int64_t)a->cfg.cp, best = 0;
    train_config c = a->cfg;
    char err[512];
    for (int64_t seq = unit; seq <= ((int64_t)1 << 30); seq *= 2) { /* up to 1G tokens */
        trainer_memory_plan p;
        c.seq_len = seq;
        if (c.max_seq < seq) c.max_seq = seq;
        memory_choice chosen;
        int ok = plan_fits(&a->cluster, &c, &p, &chosen, err, sizeof err);
        if (ok != 1) break;
        best = seq;
    }
    return best;
}

/* [parallel] zero = auto: the stage reported is the smallest that fits. */
static int zero_auto(const plan_args *a)
{
    return train_config_zero_stage(&a->cfg) == 0;
}

/* [memory] attn_kept_fraction or keep_layers = auto. */
static int memory_auto(const plan_args *a)
{
    return a->cfg.attn_kept_fraction == TRAIN_KEPT_AUTO || a->cfg.keep_layers == TRAIN_AUTO;
}

static void report(const plan_args *a, const trainer_memory_plan *t, const memory_choice *ch,
                   int ok)
{
    const train_config *c = &a->cfg;
    char parts[512], h[4][32];
    trainer_memory_parts(&t->mem, parts, sizeof parts);
    printf("plan memory: %lld parameters (%s); %d ranks = dp %d x cp %d, %d per node, ZeRO stage "
           "%d%s; sequence %lld tokens (%lld per rank); %s\n",
           (long long)t->n_params, train_config_name("model", "preset", c->preset),
           a->cluster.ranks, c->dp, c->cp, a->cluster.per_node, t->zero_stage,
           zero_auto(a) ? " (zero = auto)" : "", (long long)c->seq_len,
           (long long)t->tokens_per_rank, t->on_device ? "on a GPU per rank" : "on the CPU");
    printf("kept for the backward: attention outputs %g, layers %s%s\n", ch->kept_fraction,
           ch->keep_layers ? "kept" : "recomputed",
           memory_auto(a) ? " (auto: the fastest whose memory fits)" : "");
    printf("memory per rank: %s\n", parts);
    printf("memory per rank, the parts together: %s (a process adds its own baseline)\n",
           bu_human_bytes((double)trainer_memory_total(&t->mem), h[0], 32));
    if (c->limit_bytes > 0)
        printf("[memory] limit_bytes: %s\n", bu_human_bytes((double)c->limit_bytes, h[1], 32));
    if (t->on_device) {
        char nccl[64] = "";
        if (t->mem.nccl > 0)
            snprintf(nccl, sizeof nccl, " and NCCL's buffers %s",
                     bu_human_bytes((double)t->mem.nccl, h[3], 32));
        printf("device per rank: arena %s (the device parts and their margin)%s of a GPU's %s\n",
               bu_human_bytes((double)trainer_arena_bytes(&t->mem), h[1], 32), nccl,
               bu_human_bytes((double)a->cluster.device_bytes, h[2], 32));
    }
    if (t->mem.nccl > 0) {
        printf("NCCL's buffers, estimated from its settings: %s\n", t->nccl_basis);
    }
    double host = (double)trainer_host_bytes(&t->mem, t->on_device);
    printf("host per rank: %s%s of %s (a node's %s over %d ranks)\n",
           bu_human_bytes(host, h[1], 32), t->on_device ? " outside the device" : "",
           bu_human_bytes((double)a->cluster.host_bytes / a->cluster.per_node, h[2], 32),
           bu_human_bytes((double)a->cluster.host_bytes, h[3], 32), a->cluster.per_node);
    printf("fits: %s\n", ok ? "yes" : "no");
}

/* The report as one JSON object: the cluster, the parts by key, the totals
 * the verdict compares, the verdict and the longest sequence (0: none). */
static int report_json(const plan_args *a, const trainer_memory_plan *t, const memory_choice *ch,
                       int ok, int64_t longest)
{
    const train_config *c = &a->cfg;
    json_t *parts = json_object();
    trainer_memory_part list[TRAINER_MEMORY_PARTS];
    int n = trainer_memory_part_list(&t->mem, list);
    for (int i = 0; i < n; i++)
        json_object_set_new(parts, list[i].key, json_integer((json_int_t)list[i].bytes));
    json_t *o = json_pack(
        "{s:s, s:I, s:i, s:i, s:i, s:i, s:i, s:b, s:I, s:I, s:b, s:o, s:I, s:I, s:I, "
        "s:I, s:I, s:I, s:b, s:I, s:f, s:b, s:b}",
        "preset", train_config_name("model", "preset", c->preset), "parameters",
        (json_int_t)t->n_params, "ranks", a->cluster.ranks, "gpus_per_node", a->cluster.per_node,
        "dp", c->dp, "cp", c->cp, "zero", t->zero_stage, "zero_auto", zero_auto(a), "sequence",
        (json_int_t)c->seq_len, "tokens_per_rank", (json_int_t)t->tokens_per_rank, "on_device",
        t->on_device, "parts", parts, "total", (json_int_t)trainer_memory_total(&t->mem), "arena",
        (json_int_t)(t->on_device ? trainer_arena_bytes(&t->mem) : 0), "host_per_rank",
        (json_int_t)trainer_host_bytes(&t->mem, t->on_device), "device_memory",
        (json_int_t)a->cluster.device_bytes, "host_memory", (json_int_t)a->cluster.host_bytes,
        "limit_bytes", (json_int_t)c->limit_bytes, "fits", ok, "longest_sequence",
        (json_int_t)longest, "attn_kept_fraction", ch->kept_fraction, "keep_layers",
        ch->keep_layers, "memory_auto", memory_auto(a));
    if (!o || json_dumpf(o, stdout, JSON_INDENT(2)) != 0) {
        json_decref(o);
        fprintf(stderr, "burst plan memory: cannot write the JSON report\n");
        return -1;
    }
    printf("\n");
    json_decref(o);
    return 0;
}

int cmd_plan_memory(int argc, char **argv)
{
    plan_args a = {.cluster.device_bytes = (int64_t)80 << 30};
    train_config_default(&a.cfg);
    int status = parse_args(argc, argv, &a);
    if (status != 0) return status < 0 ? 0 : status;
    plan_cluster_defaults(&a.cluster, &a.cfg);
    trainer_memory_plan p;
    char err[512];
    memory_choice chosen;
    int ok = plan_fits(&a.cluster, &a.cfg, &p, &chosen, err, sizeof err);
    if (ok < 0) {
        fprintf(stderr, "burst plan memory: %s\n", err);
        return EXIT_USAGE;
    }
    int64_t longest = longest_fitting(&a);
    if (a.json)
        return report_json(&a, &p, &chosen, ok, longest) != 0 ? EXIT_RUN_FAILURE
               : ok                                           ? 0
                                                              : EXIT_USAGE;
    report(&a, &p, &chosen, ok);
    if (longest > 0)
        printf("longest sequence 2^k x %d that fits: %lld tokens (memory alone: [model] max_seq "
               "raised where needed)\n",
               2 * a.cfg.cp, (long long)longest);
    else
        printf("no sequence fits with this configuration\n");
    return ok ? 0 : EXIT_USAGE;
}
