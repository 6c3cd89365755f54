/* status.c: names of transport status codes and element types. */
#include "transport/transport.h"

const char *bt_status_name(bt_status st)
{
    switch (st) {
    case BT_OK: return "ok";
    case BT_ERR_ARG: return "invalid argument";
    case BT_ERR_CONFIG: return "configuration error";
    case BT_ERR_SYS: return "system error";
    case BT_ERR_PEER_LOST: return "peer lost";
    case BT_ERR_TIMEOUT: return "timeout";
    case BT_ERR_AUTH: return "authentication failed";
    }
    return "unknown status";
}

size_t bt_dtype_size(bt_dtype t)
{
    switch (t) {
    case BT_F32: return 4;
    case BT_F64: return 8;
    case BT_I64: return 8;
    }
    return 0;
}
