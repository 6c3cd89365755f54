/* device_table.cu: the device backend's table of functions
 * (kernels/device_ops.h): bk_cuda_ops under nvcc, bk_emu_ops in the SIMT
 * emulator, one entry per launcher of kernels/cuda/. */
#include "kernels/cuda/dev_common.cuh"

#ifdef BK_EMULATOR
#define BK_SDPA_FN(op) bk_emu_sdpa_##op
#else
#include "kernels/cuda/cudnn_sdpa.h"
#define BK_SDPA_FN(op) bk_cudnn_sdpa_##op
#endif

extern "C" const bk_device_ops BK_DEV_FN(ops) = {
#ifdef BK_EMULATOR
    "emulator",
#else
    "cuda",
#endif
    BK_DEV_FN(available),
    BK_DEV_FN(use),
    BK_DEV_FN(prepare),
    BK_DEV_FN(mem_info),
    BK_DEV_FN(scratch_bytes),
    BK_DEV_FN(malloc),
    BK_DEV_FN(free),
    BK_DEV_FN(copy),
    BK_DEV_FN(sync),
    BK_DEV_FN(copy_async),
    BK_DEV_FN(stream_create),
    BK_DEV_FN(stream_destroy),
    BK_DEV_FN(event_create),
    BK_DEV_FN(event_destroy),
    BK_DEV_FN(event_record),
    BK_DEV_FN(stream_wait_event),
    BK_DEV_FN(event_sync),
    BK_DEV_FN(event_query),
    BK_DEV_FN(host_malloc),
    BK_DEV_FN(host_free),
    BK_DEV_FN(note_piece),
    BK_DEV_FN(note_parts),
    BK_DEV_FN(step_begin),
    BK_DEV_FN(step_end),
    BK_DEV_FN(gemm),
    BK_DEV_FN(gemm_bf16),
    BK_DEV_FN(rmsnorm_fwd),
    BK_DEV_FN(rmsnorm_fwd_bf16),
    BK_DEV_FN(rmsnorm_bwd),
    BK_DEV_FN(rope),
    BK_DEV_FN(swiglu_fwd),
    BK_DEV_FN(swiglu_fwd_bf16),
    BK_DEV_FN(swiglu_bwd),
    BK_DEV_FN(embedding_gather),
    BK_DEV_FN(embedding_scatter_add),
    BK_DEV_FN(adamw_step),
    BK_DEV_FN(grad_sqnorm),
    BK_DEV_FN(scale),
    BK_DEV_FN(fill),
    BK_DEV_FN(axpy),
    BK_DEV_FN(swap_axes),
    BK_DEV_FN(round_bf16),
    BK_DEV_FN(widen_bf16),
    BK_DEV_FN(round_bf16_keep),
    BK_DEV_FN(cross_entropy),
    BK_DEV_FN(ce_sums_clear),
    BK_DEV_FN(cross_entropy_sum),
    BK_DEV_FN(attn_fwd_init),
    BK_DEV_FN(attn_fwd),
    BK_DEV_FN(attn_fwd_finalize),
    BK_DEV_FN(attn_delta),
    BK_DEV_FN(attn_bwd),
    BK_DEV_FN(attn_merge),
    /* the fused SDPA: cuDNN (kernels/cuda/cudnn_sdpa.h), or the emulator's
     * model of it (emu/cudnn/sdpa_model.cu) */
    BK_SDPA_FN(available),
    BK_SDPA_FN(version),
    BK_SDPA_FN(prepare),
    BK_SDPA_FN(fwd),
    BK_SDPA_FN(bwd),
    BK_DEV_FN(attn_merge_sdpa),
    BK_DEV_FN(attn_pack_stats),
    BK_DEV_FN(attn_surrogate_o),
    BK_DEV_FN(add_bf16),
};
