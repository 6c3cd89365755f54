/* cmd_selftest.c: `burst selftest` checks the kernels and the transport built
 * into this program, on whatever world it is launched in (alone, under
 * `burst run`, or under srun). */
#include <stdio.h>

#include "src/cli.h"
#include "src/selftest.h"
#include "transport/transport.h"

int cmd_selftest(int argc, char **argv)
{
    if (cli_wants_help(argc, argv)) {
        printf("usage: burst selftest\n\n"
               "Checks the kernels and the transport on whatever world it is launched in:\n"
               "  burst selftest                      one rank\n"
               "  burst run -n 4 -- burst selftest    four local ranks\n"
               "  srun -n 16 --mpi=pmix burst selftest\n"
               "Exit status 0 when every check passed on every rank, 1 otherwise.\n");
        return 0;
    }
    if (argc > 1) {
        fprintf(stderr, "burst selftest: unexpected argument '%s'\n", argv[1]);
        return EXIT_USAGE;
    }
    char err[512];
    bt_world *w = NULL;
    bt_status st = bt_world_init(NULL, &w, err, sizeof err);
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
