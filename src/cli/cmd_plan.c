/* cmd_plan.c: `burst plan attention` (plain `burst plan` too) plans
 * distributed attention without running it:
 * what each rank sends per pass, the backward direction `auto` picks, the load
 * imbalance of the layout, and with --dump-schedule every step of every rank. */
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "src/attn/attn_options.h"
#include "src/cli/cli.h"
#include "src/cli/plan_fit.h"
#include "src/plan/ring_time.h"
#include "util/options.h"

/* What the command line sets. */
typedef struct {
    attn_options attn;
    const char *pass; /* forward | backward | all */
    int dump, bf16;
    plan_profile_files profiles; /* --profile: the passes priced */
} plan_attention_args;

static int add_profile(void *a, const char *v)
{
    return plan_profile_files_add(&((plan_attention_args *)a)->profiles, v);
}

static int set_d(void *a, const char *v)
{
    return attn_parse_head_dim(v, &((plan_attention_args *)a)->attn.d);
}

static int set_mask(void *a, const char *v)
{
    static const char *const masks[] = {"none", "causal", "window", "document", "sparse"};
    attn_options *o = &((plan_attention_args *)a)->attn;
    for (size_t i = 0; i < sizeof masks / sizeof masks[0]; i++)
        if (strcmp(v, masks[i]) == 0) {
            snprintf(o->mask, sizeof o->mask, "%s", v);
            return 0;
        }
    return -1;
}

static int set_layout(void *a, const char *v)
{
    attn_options *o = &((plan_attention_args *)a)->attn;
    o->layout_given = 1;
    return seq_layout_parse(v, &o->layout) == 0 ? 0 : -1;
}

static int set_bwd(void *a, const char *v)
{
    attn_options *o = &((plan_attention_args *)a)->attn;
    if (strcmp(v, "auto") == 0)
        o->bwd = BWD_AUTO;
    else if (strcmp(v, "q") == 0)
        o->bwd = BWD_Q_SIDE;
    else if (strcmp(v, "kv") == 0)
        o->bwd = BWD_KV_SIDE;
    else
        return -1;
    return 0;
}

static int set_pass(void *a, const char *v)
{
    if (strcmp(v, "forward") != 0 && strcmp(v, "backward") != 0 && strcmp(v, "all") != 0) return -1;
    ((plan_attention_args *)a)->pass = v;
    return 0;
}

#define OPT(field) offsetof(plan_attention_args, field)
static const bu_option options[] = {
    {"--seq", "N", BU_OPT_I64, OPT(attn.seq), 1, 9.2e18, NULL,
     "global sequence length in tokens (default 16384)"},
    {"--ranks", "P", BU_OPT_INT, OPT(attn.ranks), 1, 4096, NULL,
     "ranks in the context-parallel group (default 2)"},
    {"--nodes", "M", BU_OPT_INT, OPT(attn.nodes), 1, 4096, NULL,
     "nodes; M > 1 plans the double ring (default 1)"},
    {"--flat", NULL, BU_OPT_FLAG, OPT(attn.flat), 0, 0, NULL, "the flat ring even when M > 1"},
    {"--hq", "H", BU_OPT_INT, OPT(attn.h_q), 1, 1024, NULL, "query heads (default 8)"},
    {"--hkv", "H", BU_OPT_INT, OPT(attn.h_kv), 1, 1024, NULL, "key/value heads (default 8)"},
    {"--d", "D", BU_OPT_CUSTOM, 0, 0, 0, set_d, "head dimension, a multiple of 8 (default 64)"},
    {"--mask", "M", BU_OPT_CUSTOM, 0, 0, 0, set_mask,
     "none | causal | window | document | sparse (default causal)"},
    {"--window", "W", BU_OPT_I64, OPT(attn.window), 1, 9.2e18, NULL,
     "window mask: tokens each query sees, itself included (4096)"},
    {"--doc-len", "T", BU_OPT_I64, OPT(attn.doc_len), 1, 9.2e18, NULL,
     "document mask: tokens per document (4096)"},
    {"--sparse-block", "B", BU_OPT_I64, OPT(attn.sparse_block), 1, 9.2e18, NULL,
     "sparse mask: block size in tokens (512)"},
    {"--sparse-density", "F", BU_OPT_DOUBLE, OPT(attn.sparse_density), 0, 1, NULL,
     "sparse mask: the fraction of the off-diagonal causal blocks\n"
     "kept (0.25)"},
    {"--layout", "L", BU_OPT_CUSTOM, 0, 0, 0, set_layout,
     "contiguous | zigzag (default: zigzag for causal, else the\n"
     "layout with the smaller load imbalance)"},
    {"--bwd", "B", BU_OPT_CUSTOM, 0, 0, 0, set_bwd,
     "auto | q | kv: backward direction (auto: fewer bytes)"},
    {"--pass", "P", BU_OPT_CUSTOM, 0, 0, 0, set_pass, "forward | backward | all (default all)"},
    {"--dump-schedule", NULL, BU_OPT_FLAG, OPT(dump), 0, 0, NULL, "print the whole schedule"},
    {"--bf16", NULL, BU_OPT_FLAG, OPT(bf16), 0, 0, NULL,
     "Q, K, V and dO travel in 2-byte elements (as on a device)"},
    {"--profile", "FILE", BU_OPT_CUSTOM, 0, 0, 0, add_profile,
     "price each pass with this device profile (repeatable; as\n"
     "`burst plan time` does): its time, compute, bytes' link time\n"
     "and exposed communication on its slowest rank"},
};
#undef OPT
enum { N_OPTIONS = sizeof options / sizeof options[0] };

static void usage(FILE *out)
{
    fprintf(out, "usage: burst plan attention [OPTIONS] [--dump-schedule]\n"
                 "       burst plan [OPTIONS] [--dump-schedule]   (the same)\n"
                 "       burst plan memory ...   (a rank's memory: burst plan memory --help)\n"
                 "       burst plan time ...     (a step's time: burst plan time --help)\n\n"
                 "Plans the attention ring for a sequence split over ranks and prints, per pass,\n"
                 "the bytes each rank sends and the steps it computes; --dump-schedule prints\n"
                 "every step of every rank (which block it holds, what it sends and receives\n"
                 "on which channel and link, where the trailing accumulator goes).\n\n");
    bu_options_print(out, options, N_OPTIONS, 22);
}

static void summary(const ring_schedule *s)
{
    uint64_t max = 0, total = 0;
    int computed = 0, steps = 0;
    for (int r = 0; r < s->P; r++) {
        uint64_t b = ring_schedule_bytes_sent(s, r);
        total += b;
        if (b > max) max = b;
        for (int st = 0; st < s->n_steps; st++) {
            const ring_step *x = ring_step_at(s, r, st);
            computed += x->compute;
            steps += x->block >= 0;
        }
    }
    printf("%-58s bytes sent per rank: max %llu, mean %.0f; block pairs computed %d, held %d\n",
           ring_pass_name(s->pass), (unsigned long long)max, (double)total / s->P, computed, steps);
}

/* The problem, its layout's imbalance and the backward direction. */
static void print_problem(const attn_options *o, const ring_plan_config *cfg, ring_pass bwd)
{
    printf(
        "plan: N=%lld over %d ranks (%d node%s), %s ring, layout %s, mask %s, Hq=%d Hkv=%d d=%d\n",
        (long long)o->seq, o->ranks, o->nodes, o->nodes > 1 ? "s" : "",
        cfg->topo == TOPO_DOUBLE ? "double" : "flat", seq_layout_name(cfg->layout.kind), o->mask,
        o->h_q, o->h_kv, o->d);
    if (o->seq <= (1 << 20))
        printf("load imbalance (max/mean pairs per rank): %.3f\n", attn_options_imbalance(cfg));
    printf("backward: %s%s\n", ring_pass_name(bwd),
           o->bwd == BWD_AUTO ? " (auto: fewer bytes)" : "");
}

/* --profile: the pass priced, and the sum of the passes so far. */
static int price_pass(const plan_profile *prof, const plan_attention_args *a,
                      const ring_schedule *s, double *sum)
{
    ring_pass_time t;
    char err[512];
    int per_node = a->attn.nodes > 1 ? a->attn.ranks / a->attn.nodes : a->attn.ranks;
    if (ring_pass_price(s, prof, per_node, &t, err, sizeof err) != 0) {
        fprintf(stderr, "burst plan: %s\n", err);
        return EXIT_USAGE;
    }
    *sum += t.total_s;
    printf("  priced (%s): %.4g s; on rank %d, the slowest: attention %.4g s over %d block "
           "pairs, sent %.4g s of link time, exposed %.4g s%s\n",
           prof->name, t.total_s, t.rank, t.compute_s, t.n_computed, t.comm_s, t.exposed_s,
           s->pass == RING_FORWARD ? "" : " (accumulators' adds included)");
    return 0;
}

/* Plans and prints the passes --pass asks for: 0, or EXIT_USAGE. */
static int plan_passes(const plan_attention_args *a, const ring_plan_config *cfg, ring_pass bwd)
{
    plan_profile prof;
    double total = 0;
    if (plan_profile_files_load(&a->profiles, &prof, "burst plan") != 0) return EXIT_USAGE;
    int status = 0;
    ring_pass passes[2] = {RING_FORWARD, bwd};
    for (int p = 0; p < 2; p++) {
        if (strcmp(a->pass, p == 0 ? "backward" : "forward") == 0) continue;
        char err[256];
        ring_schedule *s = ring_plan(cfg, passes[p], err, sizeof err);
        if (!s) {
            fprintf(stderr, "burst plan: %s\n", err);
            status = EXIT_USAGE;
            break;
        }
        summary(s);
        if (a->profiles.n) status = price_pass(&prof, a, s, &total);
        if (a->dump) ring_schedule_dump(stdout, s);
        ring_schedule_free(s);
        if (status) break;
    }
    if (status == 0 && a->profiles.n && strcmp(a->pass, "all") == 0)
        printf("priced, forward + backward: %.4g s\n", total);
    plan_profile_free(&prof);
    return status;
}

int cmd_plan(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "memory") == 0) return cmd_plan_memory(argc - 1, argv + 1);
    if (argc > 1 && strcmp(argv[1], "time") == 0) return cmd_plan_time(argc - 1, argv + 1);
    int subject = argc > 1 && strcmp(argv[1], "attention") == 0; /* the plan's subject named */
    plan_attention_args a = {.pass = "all"};
    attn_options_default(&a.attn);
    int parsed = bu_options_parse("burst plan", options, N_OPTIONS, argc - subject, argv + subject,
                                  &a, NULL);
    if (parsed == 1) usage(stdout);
    if (parsed != 0) return parsed == 1 ? 0 : EXIT_USAGE;
    ring_plan_config cfg;
    char err[256];
    int status = EXIT_USAGE;
    if (attn_options_build(&a.attn, &cfg, err, sizeof err) != 0) {
        fprintf(stderr, "burst plan: %s\n", err);
    } else {
        /* exact pair counts in a readable dump, and for a price */
        cfg.count_pairs = (a.dump && a.attn.seq <= 65536) || a.profiles.n > 0;
        cfg.in_bytes = a.bf16 ? 2 : 4;
        const attn_options *o = &a.attn;
        ring_pass bwd = ring_choose_backward(o->bwd, o->h_q, o->h_kv, o->d, cfg.in_bytes);
        print_problem(o, &cfg, bwd);
        status = plan_passes(&a, &cfg, bwd);
    }
    attn_options_free(&a.attn);
    return status;
}
