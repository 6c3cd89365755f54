/* cmd_selftest.c: `burst selftest` checks the kernels and the transport built
 * into this program, on whatever world it is launched in (alone, under
 * `burst run`, or under srun). */
#include <stddef.h>
#include <stdio.h>

#include "src/cli/cli.h"
#include "src/cli/selftest.h"
#include "transport/transport.h"
#include "util/options.h"

static const bu_option options[] = {
    /* the transport checks the name: it knows which backends it has */
    {"--intra", "B", BU_OPT_STRING, offsetof(bt_options, intra), 0, 0, NULL,
     "transport between ranks of a node: auto, ucx or nccl\n(default auto)"},
    {"--timeout", "S", BU_OPT_DOUBLE, offsetof(bt_options, timeout_s), 1e-3, 1e9, NULL,
     "seconds before a silent rank is lost (default 60)"},
};
enum { N_OPTIONS = sizeof options / sizeof options[0] };

static void usage(FILE *out)
{
    fprintf(out, "usage: burst selftest [--intra auto|ucx|nccl] [--timeout S]\n\n"
                 "Checks the kernels and the transport on whatever world it is launched in:\n"
                 "  burst selftest                      one rank\n"
                 "  burst run -n 4 -- burst selftest    four local ranks\n"
                 "  srun -n 16 --mpi=pmix burst selftest\n\n");
    bu_options_print(out, options, N_OPTIONS, 16);
    fprintf(out, "\nExit status 0 when every check passed on every rank, 1 otherwise,\n"
                 "2 for a bad option or transport setting.\n");
}

int cmd_selftest(int argc, char **argv)
{
    bt_options opt;
    bt_options_default(&opt);
    int parsed = bu_options_parse("burst selftest", options, N_OPTIONS, argc, argv, &opt, NULL);
    if (parsed == 1) usage(stdout);
    if (parsed != 0) return parsed == 1 ? 0 : EXIT_USAGE;
    char err[512];
    bt_world *w = NULL;
    bt_status st = bt_world_init(&opt, &w, err, sizeof err);
    if (st != BT_OK) {
        fprintf(stderr, "burst selftest: transport: %s\n", err);
        return st == BT_ERR_CONFIG ? EXIT_USAGE : EXIT_RUN_FAILURE;
    }
    int rank = bt_world_rank(w);
    if (rank == 0)
        printf("selftest: %d ranks on %d nodes (bootstrap: %s)\n", bt_world_size(w),
               bt_world_n_nodes(w), bt_world_bootstrap(w));
    int kernels_failed = selftest_kernels();
    int transport_failed = selftest_transport(w);
    /* Every rank learns whether any rank failed, so all exit alike. */
    int64_t failed = kernels_failed + transport_failed;
    if (bt_allreduce(bt_world_comm(w), &failed, 1, BT_I64, BT_SUM) != BT_OK) {
        fprintf(stderr, "burst selftest: %s\n", bt_world_error(w));
        bt_world_abort(w);
        return EXIT_RUN_FAILURE;
    }
    if (rank == 0) {
        printf("selftest kernels: %s\n", kernels_failed ? "FAILED" : "ok");
        printf("selftest transport: %s\n", transport_failed ? "FAILED" : "ok");
        printf("selftest: %s on all ranks\n", failed ? "FAILED" : "passed");
    }
    st = bt_world_finalize(w);
    if (st != BT_OK) {
        fprintf(stderr, "burst selftest: finalize: %s\n", bt_status_name(st));
        return EXIT_RUN_FAILURE;
    }
    return failed ? EXIT_RUN_FAILURE : 0;
}
