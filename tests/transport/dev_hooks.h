/* dev_hooks.h: the transport's device hooks (bt_device_hooks) filled from
 * kernels/device.h, as the engine fills them; the transport tests link the
 * SIMT emulator (kernels/emu/select_emu.c), so device memory is emulated and
 * queued copies run as late as the program allows. */
#ifndef BURST_TESTS_TRANSPORT_DEV_HOOKS_H
#define BURST_TESTS_TRANSPORT_DEV_HOOKS_H

#include "transport/transport.h"

/* Hooks on the program's device backend; device_id -1 (no GPU for NCCL). */
bt_device_hooks dev_hooks(void);

#endif
