/* device.c: device memory for callers of the kernels (kernels/device.h),
 * forwarded to the program's device backend; without one, nothing is
 * available and every call answers BK_ERR_UNSUPPORTED. */
#include "kernels/device_ops.h"

int bk_device_available(void)
{
    const bk_device_ops *d = bk_device_backend();
    return d != NULL && d->available();
}

const char *bk_device_backend_name(void)
{
    const bk_device_ops *d = bk_device_backend();
    return d ? d->name : "none";
}

bk_status bk_device_malloc(size_t bytes, void **p)
{
    const bk_device_ops *d = bk_device_backend();
    BK_CHECK_ARG(p != NULL);
    return d ? d->malloc_(bytes, p) : BK_ERR_UNSUPPORTED;
}

bk_status bk_device_free(void *p)
{
    const bk_device_ops *d = bk_device_backend();
    return d ? d->free_(p) : BK_ERR_UNSUPPORTED;
}

bk_status bk_device_upload(const bk_queue *q, void *dst, const void *src, size_t bytes)
{
    const bk_device_ops *d = bk_device_backend();
    BK_CHECK_ARG(q != NULL && (bytes == 0 || (dst != NULL && src != NULL)));
    return d ? d->copy(q, dst, src, bytes, BK_COPY_HOST_TO_DEVICE) : BK_ERR_UNSUPPORTED;
}

bk_status bk_device_download(const bk_queue *q, void *dst, const void *src, size_t bytes)
{
    const bk_device_ops *d = bk_device_backend();
    BK_CHECK_ARG(q != NULL && (bytes == 0 || (dst != NULL && src != NULL)));
    return d ? d->copy(q, dst, src, bytes, BK_COPY_DEVICE_TO_HOST) : BK_ERR_UNSUPPORTED;
}

bk_status bk_device_copy(const bk_queue *q, void *dst, const void *src, size_t bytes)
{
    const bk_device_ops *d = bk_device_backend();
    BK_CHECK_ARG(q != NULL && (bytes == 0 || (dst != NULL && src != NULL)));
    return d ? d->copy(q, dst, src, bytes, BK_COPY_DEVICE_TO_DEVICE) : BK_ERR_UNSUPPORTED;
}

bk_status bk_device_sync(const bk_queue *q)
{
    const bk_device_ops *d = bk_device_backend();
    BK_CHECK_ARG(q != NULL);
    return d ? d->sync(q) : BK_ERR_UNSUPPORTED;
}
