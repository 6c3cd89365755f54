/* worker_device.h: what the multi-rank test workers that run on the
 * (emulated) device share: host buffers copied to device memory and read
 * back, a failure reported by this rank and ended with WORKER_FAILED. Like
 * worker_util.h, whose state it uses, it lives in the header: one worker
 * program is one translation unit. */
#ifndef BURST_TESTS_WORKER_DEVICE_H
#define BURST_TESTS_WORKER_DEVICE_H

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

#include "kernels/device.h"
#include "tests/lib/worker_util.h"

/* A copy of host[bytes] in device memory, the caller's to bk_device_free. */
static inline void *worker_device_copy(const void *host, size_t bytes)
{
    void *dev = NULL;
    bk_queue q = {BK_DEVICE, NULL, 0, NULL};
    if (bk_device_malloc(bytes, &dev) != BK_OK || bk_device_upload(&q, dev, host, bytes) != BK_OK) {
        fprintf(stderr, "rank %d: cannot copy %zu bytes to the device\n", rank, bytes);
        exit(WORKER_FAILED);
    }
    return dev;
}

/* host[bytes] = dev[bytes]. */
static inline void worker_device_read(void *host, const void *dev, size_t bytes)
{
    bk_queue q = {BK_DEVICE, NULL, 0, NULL};
    if (bk_device_download(&q, host, dev, bytes) != BK_OK) {
        fprintf(stderr, "rank %d: cannot read %zu bytes back from the device\n", rank, bytes);
        exit(WORKER_FAILED);
    }
}

#endif
