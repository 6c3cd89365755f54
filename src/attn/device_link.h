/* device_link.h: this program's device as the transport sees it. The
 * transport copies and stages device memory through a table of hooks
 * (bt_device_hooks, transport/transport.h) and links no kernels; the engine
 * fills the table from kernels/device.h, here, once for every caller. */
#ifndef BURST_ATTN_DEVICE_LINK_H
#define BURST_ATTN_DEVICE_LINK_H

#include "transport/transport.h"

/* The hooks on the program's device backend (CUDA, or the emulator in the
 * tests); device_id: the GPU this rank drives, -1 when unknown. */
bt_device_hooks transport_device_hooks(int device_id);
/* bt_world_set_device with those hooks (collective over the world), then
 * the staging pool for the ring's messages in flight taken at once
 * (bt_staging_reserve of RING_MAX_IN_FLIGHT), so that no pinned allocation
 * happens in a step. */
bt_status transport_link_device(bt_world *w, int device_id);

#endif
