/* cudnn_sdpa.h: cuDNN's fused SDPA behind kernels/sdpa.h on a CUDA build
 * (internal to kernels/). kernels/cuda/cudnn_sdpa.cc implements these over
 * the cuDNN frontend where configure found it (--with-cudnn-frontend),
 * loading libcudnn at run time; kernels/cuda/cudnn_sdpa_none.c otherwise,
 * every call then answering that the build has no cuDNN attention. The
 * device table (kernels/cuda/device_table.cu) points its sdpa entries here;
 * the emulator's table points them at its model instead (emu/cudnn/). */
#ifndef BURST_KERNELS_CUDA_CUDNN_SDPA_H
#define BURST_KERNELS_CUDA_CUDNN_SDPA_H

#include "kernels/sdpa.h"

#ifdef __cplusplus
extern "C" {
#endif

/* kernels/sdpa.h's SDPA calls on cuDNN: bk_cudnn_sdpa_available, _version,
 * _prepare, _fwd, _bwd. */
BK_SDPA_DECLARE(bk_cudnn_sdpa)
/* The frontend's own support check of the graphs of call c (forward, and
 * backward when backward != 0) for compute capability sm (80, 90), with no
 * device: the graph built and validate()d against the loaded libcudnn's
 * version. 0 when cuDNN would take it; -1 with cuDNN's words in why when it
 * refuses; -2 when it cannot tell here (no frontend in the build, no
 * libcudnn to load). */
int bk_cudnn_sdpa_validate(const bk_sdpa_call *c, int backward, int sm, char *why,
                           size_t why_len);

#ifdef __cplusplus
}
#endif

#endif
