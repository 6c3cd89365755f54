/* wire.h: the bytes that travel on the rendezvous and control sockets. */
#ifndef BURST_TRANSPORT_WIRE_H
#define BURST_TRANSPORT_WIRE_H

#include <stddef.h>
#include <stdint.h>

#define BT_WIRE_VERSION 1u

/* Control-plane frame, fixed size. */
enum {
    BT_CTL_HEARTBEAT = 1, /* I am alive */
    BT_CTL_DONE = 2,      /* rank -> 0: I reached finalize */
    BT_CTL_FINISH = 3,    /* 0 -> rank: every rank reached finalize, you may leave */
    BT_CTL_LOST = 4,      /* 0 -> rank: rank `rank` is lost, for reason `arg` */
    BT_CTL_ABORT = 5,     /* rank -> 0: I am failing with status `arg` */
    BT_CTL_LINK_LOST = 6, /* rank -> 0: my data connection to rank `arg` failed */
};
enum { BT_LOST_CLOSED = 0, BT_LOST_SILENT = 1, BT_LOST_ABORTED = 2, BT_LOST_LINK = 3 };

typedef struct {
    uint32_t type;
    int32_t rank;
    int32_t arg;
    uint32_t reserved;
} bt_ctl_frame;

/* Reads (write_it = 0) or writes exactly len bytes before the deadline
 * (monotonic seconds): 0 on success, -1 on EOF or error, -2 on timeout. */
int bt_wire_io(int fd, void *buf, size_t len, int write_it, double deadline);

#endif
