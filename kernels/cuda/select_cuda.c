/* select_cuda.c: in a CUDA build, BK_DEVICE queues run the CUDA kernels
 * (kernels/device_ops.h explains the choice at link time). */
#include "kernels/device_ops.h"

const bk_device_ops *bk_device_backend(void)
{
    return &bk_cuda_ops;
}
