/* cmd_plan.c: `burst plan attention` (plain `burst plan` too) plans
 * distributed attention without running it:
 * what each rank sends per pass, the backward direction `auto` picks, the load
 * imbalance of the layout, and with --dump-schedule every step of every rank. */
#include <stdio.h>
#include <string.h>

#include "src/attn/attn_options.h"
#include "src/cli/cli.h"

static void usage(FILE *out)
{
    fprintf(out, "usage: burst plan attention [OPTIONS] [--dump-schedule]\n"
                 "       burst plan [OPTIONS] [--dump-schedule]   (the same)\n"
                 "       burst plan memory ...   (a rank's memory: burst plan memory --help)\n\n"
                 "Plans the attention ring for a sequence split over ranks and prints, per pass,\n"
                 "the bytes each rank sends and the steps it computes; --dump-schedule prints\n"
                 "every step of every rank (which block it holds, what it sends and receives\n"
                 "on which channel and link, where the trailing accumulator goes).\n\n");
    attn_options_help(out);
    fprintf(out, "  --pass P         forward | backward | all (default all)\n"
                 "  --dump-schedule  print the whole schedule\n");
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

int cmd_plan(int argc, char **argv)
{
    attn_options o;
    attn_options_default(&o);
    int dump = 0;
    const char *pass = "all";
    if (argc > 1 && strcmp(argv[1], "memory") == 0) return cmd_plan_memory(argc - 1, argv + 1);
    int first = argc > 1 && strcmp(argv[1], "attention") == 0 ? 2 : 1; /* the plan's subject */
    for (int i = first; i < argc; i++) {
        int used = attn_options_parse(&o, argc, argv, &i, "burst plan");
        if (used < 0) return EXIT_USAGE;
        if (used) continue;
        if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            usage(stdout);
            return 0;
        } else if (strcmp(argv[i], "--dump-schedule") == 0) {
            dump = 1;
        } else if (strcmp(argv[i], "--pass") == 0 && i + 1 < argc &&
                   (strcmp(argv[i + 1], "forward") == 0 || strcmp(argv[i + 1], "backward") == 0 ||
                    strcmp(argv[i + 1], "all") == 0)) {
            pass = argv[++i];
        } else {
            fprintf(stderr, "burst plan: unknown option '%s'\n\n", argv[i]);
            usage(stderr);
            return EXIT_USAGE;
        }
    }
    ring_plan_config cfg;
    char err[256];
    if (attn_options_build(&o, &cfg, err, sizeof err) != 0) {
        fprintf(stderr, "burst plan: %s\n", err);
        attn_options_free(&o);
        return EXIT_USAGE;
    }
    cfg.count_pairs = dump && o.seq <= 65536; /* exact pair counts in a readable dump */
    ring_pass bwd = ring_choose_backward(o.bwd, o.h_q, o.h_kv, o.d, cfg.in_bytes);
    printf(
        "plan: N=%lld over %d ranks (%d node%s), %s ring, layout %s, mask %s, Hq=%d Hkv=%d d=%d\n",
        (long long)o.seq, o.ranks, o.nodes, o.nodes > 1 ? "s" : "",
        cfg.topo == TOPO_DOUBLE ? "double" : "flat", seq_layout_name(cfg.layout.kind), o.mask,
        o.h_q, o.h_kv, o.d);
    if (o.seq <= (1 << 20))
        printf("load imbalance (max/mean pairs per rank): %.3f\n", attn_options_imbalance(&cfg));
    printf("backward: %s%s\n", ring_pass_name(bwd),
           o.bwd == BWD_AUTO ? " (auto: fewer bytes)" : "");
    ring_pass passes[2] = {RING_FORWARD, bwd};
    int status = 0;
    for (int p = 0; p < 2; p++) {
        if ((p == 0 && strcmp(pass, "backward") == 0) || (p == 1 && strcmp(pass, "forward") == 0))
            continue;
        ring_schedule *s = ring_plan(&cfg, passes[p], err, sizeof err);
        if (!s) {
            fprintf(stderr, "burst plan: %s\n", err);
            status = EXIT_USAGE;
            break;
        }
        summary(s);
        if (dump) ring_schedule_dump(stdout, s);
        ring_schedule_free(s);
    }
    attn_options_free(&o);
    return status;
}
