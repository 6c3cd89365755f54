/* ops_cpu.h: what the CPU kernels of kernels/ops.h share privately: the queue
 * check and the OpenMP thread count taken from the queue (never from a global). */
#ifndef BURST_KERNELS_CPU_OPS_CPU_H
#define BURST_KERNELS_CPU_OPS_CPU_H

#include <omp.h>

#include "kernels/device_ops.h"
#include "kernels/ops.h"

/* The queue must exist; the CPU backend serves host buffers only. */
#define BK_CPU_QUEUE_CHECK(q)                                                                      \
    do {                                                                                           \
        BK_CHECK_ARG((q) != NULL);                                                                 \
        if ((q)->where != BK_HOST) return BK_ERR_UNSUPPORTED;                                      \
    } while (0)

/* The queue must exist; a device queue goes to the device backend's `op`
 * called with `args` (kernels/device_ops.h), and the CPU serves host queues. */
#define BK_CPU_OR_DEVICE(q, op, args)                                                              \
    do {                                                                                           \
        BK_CHECK_ARG((q) != NULL);                                                                 \
        BK_DEVICE_DISPATCH(q, op, args);                                                           \
        if ((q)->where != BK_HOST) return BK_ERR_UNSUPPORTED;                                      \
    } while (0)

/* OpenMP threads for a kernel on this queue. */
static inline int bk_cpu_threads(const bk_queue *q)
{
    return q->n_threads > 0 ? q->n_threads : omp_get_max_threads();
}

#endif
