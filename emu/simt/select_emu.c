/* select_emu.c: linked into the tests of tests/kernels/ as an object, ahead of
 * the libraries, so that their BK_DEVICE queues run the CUDA kernel sources in
 * the SIMT emulator (kernels/device_ops.h explains the choice at link time). */
#include "kernels/device_ops.h"

const bk_device_ops *bk_device_backend(void)
{
    return &bk_emu_ops;
}
