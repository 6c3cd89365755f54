/* dev_util.h: what the device kernel tests add to tests/lib: device buffers
 * filled from host arrays and read back (so that one test source runs in the
 * SIMT emulator and on a GPU), and the main that skips (exit 77) when the
 * program has no usable device. */
#ifndef BURST_TESTS_KERNELS_DEV_UTIL_H
#define BURST_TESTS_KERNELS_DEV_UTIL_H

#include <check.h>
#include <stddef.h>

#include "kernels/device.h"

/* A device queue on the default stream. */
bk_queue dev_queue(void);

/* Device copy of host[bytes] (bytes may be 0: a valid dummy buffer). */
void *dev_put(const void *host, size_t bytes);
/* host[bytes] = dev[bytes]. */
void dev_get(void *host, const void *dev, size_t bytes);
void dev_free(void *dev);

/* Runs the suite (tests/lib/check_main.h); 77 (skip) when no device is
 * available to this program. */
int dev_test_main(Suite *s);

#endif
