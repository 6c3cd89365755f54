/* device_none.c: a build without CUDA has no device backend: BK_DEVICE queues
 * answer BK_ERR_UNSUPPORTED (kernels/device_ops.h). */
#include "kernels/device_ops.h"

const bk_device_ops *bk_device_backend(void)
{
    return NULL;
}
