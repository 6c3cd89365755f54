/* shared_math.cu: compiles the shared per-element math for the device, so a
 * CUDA build proves that kernels/shared_math.h stays device-clean. */
#include "kernels/shared_math.h"

__global__ void bk_logaddexp_kernel(const float *a, const float *b, float *out, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = bk_logaddexp(a[i], b[i]);
}
