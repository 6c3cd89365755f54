/* selftest_transport.c: a quick check of the transport for `burst selftest` on
 * whatever world it was launched in: a ring exchange on two channels at once,
 * an all-reduce and the two-level all-reduce against their closed forms. */
#include <stdio.h>
#include <stdlib.h>

#include "src/cli/selftest.h"
#include "transport/transport.h"

static int check(bt_world *w, int ok, const char *what)
{
    if (!ok) fprintf(stderr, "selftest transport: rank %d: %s is wrong\n", bt_world_rank(w), what);
    return ok ? 0 : 1;
}

int selftest_transport(bt_world *w)
{
    bt_comm *world = bt_world_comm(w);
    int rank = bt_world_rank(w), size = bt_world_size(w), failures = 0;
    int next = (rank + 1) % size, prev = (rank - 1 + size) % size;

    /* Two channels cross in opposite directions: their messages must not mix. */
    enum { N = 1 << 16 };
    int *fwd_out = malloc(N * sizeof(int)), *fwd_in = malloc(N * sizeof(int));
    int bwd_out = -rank, bwd_in = 1;
    for (int i = 0; i < N; i++) fwd_out[i] = rank * N + i;
    bt_request *reqs[4];
    bt_status st = bt_irecv(world, prev, 0, fwd_in, N * sizeof(int), &reqs[0]);
    if (st == BT_OK) st = bt_irecv(world, next, 1, &bwd_in, sizeof bwd_in, &reqs[1]);
    if (st == BT_OK) st = bt_isend(world, next, 0, fwd_out, N * sizeof(int), &reqs[2]);
    if (st == BT_OK) st = bt_isend(world, prev, 1, &bwd_out, sizeof bwd_out, &reqs[3]);
    if (st == BT_OK) st = bt_waitall(4, reqs);
    if (st == BT_OK) {
        int ok = 1;
        for (int i = 0; i < N; i++) ok &= fwd_in[i] == prev * N + i;
        failures += check(w, ok, "the ring exchange on channel 0");
        failures += check(w, bwd_in == -next, "the reverse ring exchange on channel 1");
    }
    free(fwd_out);
    free(fwd_in);

    double sums[3] = {rank, 1.0, (double)rank * rank};
    if (st == BT_OK) st = bt_allreduce(world, sums, 3, BT_F64, BT_SUM);
    if (st == BT_OK) {
        double n = size;
        failures += check(w, sums[0] == n * (n - 1) / 2 && sums[1] == n &&
                                 sums[2] == (n - 1) * n * (2 * n - 1) / 6,
                          "the all-reduce");
    }
    int64_t hier[2] = {rank, -rank};
    if (st == BT_OK) st = bt_allreduce_hier(w, hier, 2, BT_I64, BT_MAX);
    if (st == BT_OK) failures += check(w, hier[0] == size - 1 && hier[1] == 0, "the two-level all-reduce");
    if (st == BT_OK) st = bt_barrier(world);
    if (st != BT_OK) {
        fprintf(stderr, "selftest transport: %s\n", bt_world_error(w));
        return 1;
    }
    return failures ? 1 : 0;
}
