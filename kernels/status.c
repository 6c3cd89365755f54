/* status.c: names of kernel status codes. */
#include "kernels/kernels_common.h"

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
