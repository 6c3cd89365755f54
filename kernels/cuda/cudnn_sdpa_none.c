/* cudnn_sdpa_none.c: kernels/cuda/cudnn_sdpa.h in a CUDA build without the
 * cuDNN frontend: no fused SDPA, and every call says so. */
#include <stdio.h>

#include "kernels/cuda/cudnn_sdpa.h"

static const char no_cudnn[] = "this build has no cuDNN attention (configure --with-cudnn-frontend)";

int bk_cudnn_sdpa_available(char *why, size_t why_len)
{
    snprintf(why, why_len, "%s", no_cudnn);
    return 0;
}

long bk_cudnn_sdpa_version(void)
{
    return 0;
}

bk_status bk_cudnn_sdpa_prepare(const bk_sdpa_call *calls, int n, int backward,
                                size_t *workspace_bytes)
{
    (void)calls, (void)n, (void)backward;
    *workspace_bytes = 0;
    return BK_ERR_UNSUPPORTED;
}

bk_status bk_cudnn_sdpa_fwd(const bk_queue *q, const bk_sdpa_call *c, const uint16_t *Q,
                            const uint16_t *K, const uint16_t *V, uint16_t *O_blk, float *stats,
                            void *workspace, size_t workspace_bytes)
{
    (void)q, (void)c, (void)Q, (void)K, (void)V, (void)O_blk, (void)stats, (void)workspace,
        (void)workspace_bytes;
    return BK_ERR_UNSUPPORTED;
}

bk_status bk_cudnn_sdpa_bwd(const bk_queue *q, const bk_sdpa_call *c, const uint16_t *Q,
                            const uint16_t *K, const uint16_t *V, const uint16_t *O,
                            const uint16_t *dO, const float *stats, uint16_t *dQ, uint16_t *dK,
                            uint16_t *dV, void *workspace, size_t workspace_bytes)
{
    (void)q, (void)c, (void)Q, (void)K, (void)V, (void)O, (void)dO, (void)stats, (void)dQ,
        (void)dK, (void)dV, (void)workspace, (void)workspace_bytes;
    return BK_ERR_UNSUPPORTED;
}

int bk_cudnn_sdpa_validate(const bk_sdpa_call *c, int backward, int sm, char *why,
                           size_t why_len)
{
    (void)c, (void)backward, (void)sm;
    snprintf(why, why_len, "%s", no_cudnn);
    return -2;
}
