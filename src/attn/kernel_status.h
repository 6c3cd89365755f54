/* kernel_status.h: a kernel's status (kernels/, bk_status) as the engine's
 * (bt_status, what the ring and the model return), and the message of a call
 * that failed: one mapping for src/attn/ and src/train/, the lowest room that
 * sees both kernels/ and transport/. */
#ifndef BURST_ATTN_KERNEL_STATUS_H
#define BURST_ATTN_KERNEL_STATUS_H

#include <stddef.h>

#include "kernels/kernels_common.h"
#include "transport/transport.h"

/* BT_OK; BT_ERR_ARG for a call the kernel refused (BK_ERR_ARG); BT_ERR_SYS
 * for everything else: a device that failed (BK_ERR_DEVICE), memory that
 * could not be had, a shape or location the backend does not handle. */
bt_status attn_kernel_status(bk_status st);
/* Returns a kernel call's failure, as attn_kernel_status maps it, from the
 * calling function (BT_CHECK for a kernel): for a chain with nothing to
 * undo. */
#define CHECK_KERNEL(call) BT_CHECK(attn_kernel_status(call))

/* What a caller reports when its kernels failed with st (as
 * attn_kernel_status gave it) and the transport holds no error of its own:
 * "a kernel refused its arguments" for BT_ERR_ARG; otherwise "a kernel
 * failed: " and the kernels' message (bk_kernel_error: "device error: CALL:
 * CUDA's error string"), or, when there is none, what the failure can have
 * been. Into buf[len]; returns buf. */
const char *attn_kernel_failure(bt_status st, char *buf, size_t len);

#endif
