/* device.h: buffers on the device, and the entry points that only make sense
 * with a device in mind (bf16 inputs, the cuBLASLt GEMM, AdamW's bf16 copy).
 *
 * Every kernel of kernels/ops.h and kernels/attention.h serves a BK_DEVICE
 * queue too: its buffers are then device memory and the work is queued on
 * q->stream (a cudaStream_t; NULL = the default stream). Which device backend
 * a program has is decided when it is linked: the CUDA kernels in a CUDA
 * build, none otherwise (BK_DEVICE queues answer BK_ERR_UNSUPPORTED), or the
 * SIMT emulator for the tests of tests/kernels/, where "device" memory is host
 * memory and every kernel runs on the CPU (doc/KERNELS.md).
 *
 * On a device queue, as on the host, invalid arguments return BK_ERR_ARG
 * before anything is written. Checks that need the data (tokens, labels in
 * range) run a small kernel and wait for it. Host memory passed with a CUDA
 * device queue is refused with BK_ERR_UNSUPPORTED; a CUDA error gives
 * BK_ERR_DEVICE (bk_kernel_error() says which). Functions that return a
 * value to the host (bk_grad_sqnorm, n_valid of the cross-entropy, attention
 * stats) wait for the stream. */
#ifndef BURST_KERNELS_DEVICE_H
#define BURST_KERNELS_DEVICE_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/attention.h"
#include "kernels/kernels_common.h"
#include "kernels/ops.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Element types of buffers that may be either. bf16 is stored as uint16_t
 * (kernels/bf16.h). */
typedef enum { BK_F32 = 0, BK_BF16 = 1 } bk_dtype;

/* ---------------------------------------------------------------- device memory */
/* 1 when BK_DEVICE queues work in this program (a CUDA device is present, or
 * the program runs the emulator), 0 otherwise. */
int bk_device_available(void);
/* "cuda", "emulator" or "none". */
const char *bk_device_backend_name(void);
/* Makes device index % count the calling thread's device (the GPU a rank
 * drives; *count: how many the node has); the emulator has one. */
bk_status bk_device_use(int index, int *count);
/* Makes now what the device's kernels otherwise make at their first call and
 * keep (cuBLASLt's handle and 32 MiB workspace, with cudaMalloc), so that no
 * later kernel call allocates from the runtime and the free memory read after
 * it is what is left for the caller. Nothing to do in the emulator. */
bk_status bk_device_prepare(void);
/* Free and total bytes of the device in use. In the emulator, whose device
 * memory is the host's, BK_ERR_UNSUPPORTED, unless BK_EMU_DEVICE_BYTES=N gives
 * it N bytes (kernels/cuda/device_memory.cu). */
bk_status bk_device_memory(size_t *free_bytes, size_t *total_bytes);
/* The most scratch a device kernel holds at once (one piece, given back
 * before the call returns) when RMSNorm sees at most `rows` rows of `width`
 * floats and bk_grad_sqnorm one buffer of at most sqnorm_elements floats per
 * call: what an arena on a device queue must keep free for the kernels
 * (kernels/arena.h). 0 without a device backend. */
size_t bk_device_scratch_bytes(int64_t rows, int64_t width, int64_t sqnorm_elements);
/* Device memory of `bytes` bytes (*p = NULL when bytes == 0). */
bk_status bk_device_malloc(size_t bytes, void **p);
bk_status bk_device_free(void *p);
/* Copies between host and device memory on q's stream; they return once the
 * copy is complete. */
bk_status bk_device_upload(const bk_queue *q, void *dst, const void *src, size_t bytes);
bk_status bk_device_download(const bk_queue *q, void *dst, const void *src, size_t bytes);
/* dst[bytes] = src[bytes], both device memory, queued on q's stream (it
 * returns at once; bk_device_sync waits). The regions must not overlap. */
bk_status bk_device_copy(const bk_queue *q, void *dst, const void *src, size_t bytes);
/* Waits until everything queued on q has run. */
bk_status bk_device_sync(const bk_queue *q);
/* The arena's pieces of device memory (kernels/arena.h): p handed out with
 * `bytes` bytes, or given back when bytes is 0. A GPU needs nothing; the
 * emulator tracks which stream last wrote each piece (its stream hazards). */
void bk_device_note_piece(const void *p, size_t bytes);
/* The buffer at p holds `parts` consecutive parts of part_bytes each that the
 * program uses apart (kernels on one while transfers use another), until
 * noted again with parts 0. A GPU needs nothing; the emulator, which takes a
 * kernel to touch the whole buffer its pointer lies in, then takes a kernel
 * given a pointer into a part to touch that part alone. */
void bk_device_note_parts(const void *p, size_t part_bytes, int parts);

/* The trainer's steps, for the device's account of them. On the emulator a
 * step's beginning starts a fresh account and its end keeps it for
 * bk_emu_account_get and, under BK_EMU_COUNT, prints it: launches, bytes,
 * products, copies and host waits (emu/simt/simt_account.h). A GPU keeps no
 * account (nothing to do). */
void bk_device_step_begin(int64_t step);
void bk_device_step_end(void);

/* ---------------------------------------------------------------- streams and events */
/* A queue's stream runs its work in order; work on different streams may
 * overlap (compute on one, copies and communication on others). An event marks
 * a point in a stream: another stream can be told to wait for it, or the host
 * can. In the emulator, queued copies run as late as the program allows
 * (emu/simt/simt_stream.h), so a missing wait shows as stale data there.
 * Destroying a stream runs what it still has queued first; an event recorded
 * on a stream is not used after that stream is destroyed. */
/* A new stream, not ordered with the default stream (NULL). */
bk_status bk_device_stream_create(void **stream);
bk_status bk_device_stream_destroy(void *stream);
bk_status bk_device_event_create(void **event);
bk_status bk_device_event_destroy(void *event);
/* The event now stands for everything queued on q's stream so far. */
bk_status bk_device_event_record(void *event, const bk_queue *q);
/* Work queued on q after this call runs after the event's work; the host does
 * not wait. An event never recorded is complete. */
bk_status bk_device_stream_wait_event(const bk_queue *q, void *event);
/* The host waits until the event's work has run. */
bk_status bk_device_event_sync(void *event);
/* Asks without waiting whether the event's work has run: 1 when it has (or the
 * event was never recorded), 0 while it is pending, -BK_ERR_* (negative) on an
 * error. What polls instead of waiting (the transport's staging pipeline)
 * needs it. In the emulator a query of work not yet run answers 0 once and
 * runs nothing; the next query runs the work up to the event and answers 1: a
 * caller that takes 0 for done reads the old data, a caller that polls ends. */
int bk_device_event_query(void *event);
/* Copies queued on q's stream; they return at once. The host buffer must stay
 * as it is (source) or untouched (destination) until the stream has run the
 * copy; page-locked host memory (bk_host_pinned_malloc) lets the copy overlap
 * other work. */
bk_status bk_device_upload_async(const bk_queue *q, void *dst, const void *src, size_t bytes);
bk_status bk_device_download_async(const bk_queue *q, void *dst, const void *src, size_t bytes);
/* Page-locked host memory of `bytes` bytes (*p = NULL when bytes == 0), and
 * its release; plain host memory in the emulator. */
bk_status bk_host_pinned_malloc(size_t bytes, void **p);
bk_status bk_host_pinned_free(void *p);

/* ---------------------------------------------------------------- GEMM */
/* C[m, n] = alpha op(A) op(B) + beta C, row-major as bk_gemm, with A and B in
 * bf16 and C in c_type (BK_F32 or BK_BF16), accumulated in fp32. On a device
 * queue: cuBLASLt (no hand-written GEMM); on the host and in the emulator:
 * the inputs widened to fp32 and bk_gemm_builtin. beta = 0 overwrites C. */
bk_status bk_gemm_bf16(const bk_queue *q, bk_transpose ta, bk_transpose tb, int64_t m, int64_t n,
                       int64_t k, float alpha, const uint16_t *a, int64_t lda, const uint16_t *b,
                       int64_t ldb, float beta, void *c, bk_dtype c_type, int64_t ldc);

/* ---------------------------------------------------------------- rounding */
/* y[n] = x rounded to bf16 (to nearest, ties to even; kernels/bf16.h), the
 * rounding the device attention kernels apply to fp32 inputs as they load
 * them: rounded inputs give those kernels the same bits as the fp32 ones. */
bk_status bk_round_bf16(const bk_queue *q, int64_t n, const float *x, uint16_t *y);
/* y[n] = x widened to fp32 (exact): what reads bf16 values through an fp32
 * kernel (the norm gains and the embedding of bf16 parameters). */
bk_status bk_widen_bf16(const bk_queue *q, int64_t n, const uint16_t *x, float *y);
/* y[n] = x rounded to bf16 and x[n] = y widened, in one pass: an activation
 * that goes on in fp32 as the bf16 values it is kept as (bk_round_bf16 then
 * bk_widen_bf16 back, to the bit). */
bk_status bk_round_bf16_keep(const bk_queue *q, int64_t n, float *x, uint16_t *y);

/* ---------------------------------------------------------------- AdamW */
/* bk_adamw_step, then param_bf16[n] = param rounded to bf16 (the copy the
 * forward reads), in the same pass on a device. */
bk_status bk_adamw_step_bf16(const bk_queue *q, int64_t n, float *param, const float *grad,
                             float *m, float *v, const bk_adamw_params *hp, int64_t step,
                             float grad_scale, uint16_t *param_bf16);

/* ---------------------------------------------------------------- attention */
/* bk_attn_fwd and bk_attn_bwd with Q, K, V (and dO) in bf16; O, lse, delta
 * and the gradients stay fp32. On a device queue the tiles run on tensor cores
 * (mma.sync bf16 with fp32 accumulation) for either input type: fp32 inputs
 * are rounded to bf16 as they are loaded. On the host the inputs are widened
 * to fp32 and the CPU kernels run. */
bk_status bk_attn_fwd_bf16(const bk_queue *q, const bk_attn_geom *g, const uint16_t *Q,
                           const uint16_t *K, const uint16_t *V, float *O, float *lse,
                           bk_attn_stats *stats);
bk_status bk_attn_bwd_bf16(const bk_queue *q, const bk_attn_geom *g, const uint16_t *Q,
                           const uint16_t *K, const uint16_t *V, const uint16_t *dO,
                           const float *lse, const float *delta, float *dQ, float *dK, float *dV,
                           bk_attn_stats *stats);

#ifdef __cplusplus
}
#endif

#endif
