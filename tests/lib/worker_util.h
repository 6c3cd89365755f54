/* worker_util.h: what every multi-rank test worker shares: the world, this
 * rank's identity, a failure count, EXPECT (count and report a failed check,
 * go on) and must (a transport call that has to succeed, else exit 1). One
 * worker program is one translation unit, so the state lives here. */
#ifndef BURST_TESTS_WORKER_UTIL_H
#define BURST_TESTS_WORKER_UTIL_H

#include <stdio.h>
#include <stdlib.h>

#include "transport/transport.h"

static bt_world *world;
static int rank, size, failures;

#define EXPECT(cond, ...)                                                                          \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "rank %d: %s:%d: ", rank, __FILE__, __LINE__);                         \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fprintf(stderr, "\n");                                                                 \
            failures++;                                                                            \
        }                                                                                          \
    } while (0)

static inline void must(bt_status st, const char *what)
{
    if (st == BT_OK) return;
    fprintf(stderr, "rank %d: %s failed: %s: %s\n", rank, what, bt_status_name(st),
            bt_world_error(world));
    exit(1);
}

#endif
