/* cudnn_sdpa_none.c: kernels/cuda/cudnn_sdpa.h in a CUDA build whose
 * configure found no cuDNN frontend (or was given --without-cudnn-frontend):
 * cuDNN's attention is not built, so every call says so and the ring keeps to
 * our own kernels. */
#include <stdio.h>

#include "kernels/cuda/cudnn_sdpa.h"
#include "kernels/device_ops.h"

static const char NOT_BUILT[] =
    "this build has no cuDNN attention (configure --with-cudnn-frontend)";

static void say_not_built(char *why, size_t why_len)
{
    if (why && why_len) snprintf(why, why_len, "%s", NOT_BUILT);
}

/* BK_ERR_UNSUPPORTED, with bk_kernel_error saying why. */
static bk_status not_built(const char *call)
{
    (void)bk_device_failed(call, NOT_BUILT);
    return BK_ERR_UNSUPPORTED;
}

int bk_cudnn_sdpa_available(char *why, size_t why_len)
{
    say_not_built(why, why_len);
    return 0;
}

long bk_cudnn_sdpa_version(void)
{
    return 0;
}

bk_status bk_cudnn_sdpa_prepare(const bk_sdpa_call *calls, int n, int backward,
                                size_t *workspace_bytes)
{
    return not_built("bk_sdpa_prepare");
}

bk_status bk_cudnn_sdpa_fwd(const bk_queue *q, const bk_sdpa_call *c, const uint16_t *Q,
                            const uint16_t *K, const uint16_t *V, uint16_t *O_blk, float *stats,
                            void *workspace, size_t workspace_bytes)
{
    return not_built("bk_sdpa_fwd");
}

bk_status bk_cudnn_sdpa_bwd(const bk_queue *q, const bk_sdpa_call *c, const uint16_t *Q,
                            const uint16_t *K, const uint16_t *V, const uint16_t *O,
                            const uint16_t *dO, const float *stats, uint16_t *dQ, uint16_t *dK,
                            uint16_t *dV, void *workspace, size_t workspace_bytes)
{
    return not_built("bk_sdpa_bwd");
}

int bk_cudnn_sdpa_validate(const bk_sdpa_call *c, int backward, int sm, char *why, size_t why_len)
{
    say_not_built(why, why_len);
    return -2;
}
