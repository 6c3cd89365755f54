/* cmd_selftest.c: `burst selftest` checks the kernels and the transport built
 * into this program, on whatever world it is launched in (alone, under
 * `burst run`, or under srun). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "src/cli/cli.h"
#include "src/cli/selftest.h"
#include "transport/transport.h"

int cmd_selftest(int argc, char **argv)
{
    if (cli_wants_help(argc, argv)) {
        printf("usage: burst selftest [--intra auto|ucx|nccl] [--timeout S]\n\n"
               "Checks the kernels and the transport on whatever world it is launched in:\n"
               "  burst selftest                      one rank\n"
               "  burst run -n 4 -- burst selftest    four local ranks\n"
               "  srun -n 16 --mpi=pmix burst selftest\n"
               "  --intra B     transport between ranks of a node (default auto)\n"
               "  --timeout S   seconds before a silent rank is lost (default 60)\n"
               "Exit status 0 when every check passed on every rank, 1 otherwise,\n"
               "2 for a bad option or transport setting.\n");
        return 0;
    }
    bt_options opt;
    bt_options_default(&opt);
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--intra") == 0 && i + 1 < argc) {
            opt.intra = argv[++i];
        } else if (strcmp(argv[i], "--timeout") == 0 && i + 1 < argc) {
            opt.timeout_s = atof(argv[++i]);
        } else {
            fprintf(stderr, "burst selftest: unexpected argument '%s'\n", argv[i]);
            return EXIT_USAGE;
        }
    }
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
