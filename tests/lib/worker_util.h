/* worker_util.h: what every multi-rank test worker shares: the world, this
 * rank's identity, a failure count, EXPECT (count and report a failed check,
 * go on), the exit status a worker gives for each way it can stop, must (a
 * transport call that has to succeed, else report it and exit), joining the
 * world and, at the end, the failures of all ranks. One worker program is one
 * translation unit, so the state lives here. */
#ifndef BURST_TESTS_WORKER_UTIL_H
#define BURST_TESTS_WORKER_UTIL_H

#include <stdio.h>
#include <stdlib.h>

#include "transport/transport.h"

static bt_world *world;
static int rank, size, failures;

/* A worker's exit status; the tests that launch the workers read them. */
enum {
    WORKER_FAILED = 1,    /* a check failed, or a call that had to succeed did not */
    WORKER_USAGE = 2,     /* bad arguments */
    WORKER_PEER_LOST = 3, /* a rank was lost (BT_ERR_PEER_LOST) */
    WORKER_TIMED_OUT = 4, /* a wait timed out (BT_ERR_TIMEOUT), where a scenario expects it */
    WORKER_REFUSED = 5,   /* the job's secret was refused (BT_ERR_AUTH) */
};

#define EXPECT(cond, ...)                                                                          \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "rank %d: %s:%d: ", rank, __FILE__, __LINE__);                         \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fprintf(stderr, "\n");                                                                 \
            failures++;                                                                            \
        }                                                                                          \
    } while (0)

/* The exit status for a transport call that ended with st. */
static inline int worker_status(bt_status st)
{
    return st == BT_ERR_PEER_LOST ? WORKER_PEER_LOST
           : st == BT_ERR_AUTH    ? WORKER_REFUSED
                                  : WORKER_FAILED;
}

/* Reports "rank R: WHAT: <the world's error> (<status>)" on stderr. */
static inline void worker_report(bt_status st, const char *what)
{
    fprintf(stderr, "rank %d: %s: %s (%s)\n", rank, what, bt_world_error(world),
            bt_status_name(st));
}

/* Reports st and exits with worker_status(st). */
static inline void worker_exit(bt_status st, const char *what)
{
    worker_report(st, what);
    exit(worker_status(st));
}

static inline void must(bt_status st, const char *what)
{
    if (st != BT_OK) worker_exit(st, what);
}

/* Joins the world the launcher set up (world, rank, size) with the
 * transport's options opt (NULL: the defaults); when that fails, prints
 * "NAME: <why>" and exits with worker_status. */
static inline void worker_init_with(const char *name, const bt_options *opt)
{
    char err[512];
    bt_status st = bt_world_init(opt, &world, err, sizeof err);
    if (st != BT_OK) {
        fprintf(stderr, "%s: %s\n", name, err);
        exit(worker_status(st));
    }
    rank = bt_world_rank(world);
    size = bt_world_size(world);
}

static inline void worker_init(const char *name)
{
    worker_init_with(name, NULL);
}

/* Sums the failures of every rank and leaves the world: the total, the same
 * on every rank. */
static inline int64_t worker_finish(void)
{
    int64_t total = failures;
    must(bt_allreduce(bt_world_comm(world), &total, 1, BT_I64, BT_SUM), "final allreduce");
    must(bt_world_finalize(world), "finalize");
    return total;
}

#endif
