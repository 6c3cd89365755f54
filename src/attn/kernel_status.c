/* kernel_status.c: see kernel_status.h. */
#include <stdio.h>

#include "kernels/kernels_common.h"
#include "src/attn/kernel_status.h"

bt_status attn_kernel_status(bk_status st)
{
    return st == BK_OK ? BT_OK : st == BK_ERR_ARG ? BT_ERR_ARG : BT_ERR_SYS;
}

const char *attn_kernel_failure(bt_status st, char *buf, size_t len)
{
    const char *kernel = bk_kernel_error();
    if (st == BT_ERR_ARG)
        snprintf(buf, len, "a kernel refused its arguments");
    else if (st == BT_ERR_SYS && kernel[0])
        snprintf(buf, len, "a kernel failed: %s", kernel);
    else if (st == BT_ERR_SYS)
        snprintf(buf, len,
                 "a kernel failed (out of memory, or a shape or memory its backend "
                 "does not handle)");
    else
        snprintf(buf, len, "a kernel failed: %s", bt_status_name(st));
    return buf;
}
