/* status.c: names of kernel status codes, and the message of each thread's
 * last failure (bk_kernel_error, kept by bk_device_failed and
 * bk_out_of_memory; nothing else here, so that the emulator's own tests link
 * it without a backend). */
#include <string.h>

#include "kernels/device_ops.h"
#include "kernels/kernels_common.h"
#include "util/alloc.h"

const char *bk_status_name(bk_status st)
{
    switch (st) {
    case BK_OK: return "ok";
    case BK_ERR_ARG: return "invalid argument";
    case BK_ERR_UNSUPPORTED: return "unsupported";
    case BK_ERR_DEVICE: return "device error";
    case BK_ERR_NOMEM: return "out of memory";
    }
    return "unknown status";
}

/* The calling thread's last failure with a message (bk_kernel_error). */
static _Thread_local char last_error[512];

bk_status bk_device_failed(const char *call, const char *detail)
{
    size_t name = strcspn(call, "(");
    snprintf(last_error, sizeof last_error, "device error: %.*s: %s", (int)name, call,
             detail && detail[0] ? detail : "failed");
    return BK_ERR_DEVICE;
}

bk_status bk_out_of_memory(size_t bytes, const char *what)
{
    bu_no_memory(last_error, sizeof last_error, bytes, what);
    return BK_ERR_NOMEM;
}

const char *bk_kernel_error(void)
{
    return last_error;
}
