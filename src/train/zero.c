/* zero.c: AdamW with ZeRO over a communicator, the learning-rate schedule,
 * and the model's side of ZeRO (its windows, the gradient sink's hook and
 * the parameter source's); see zero.h.
 *
 * Layout: the flat parameter index [0, n) is padded to padded = P * shard
 * (P = communicator size, shard = ceil(n / P)); rank r owns
 * [min(r * shard, n), min((r + 1) * shard, n)), possibly empty on the last
 * ranks when n < P. The padding never holds anything but zeros.
 *
 * A step, per rank (all buffers fp32 unless said otherwise):
 *   1. reduce-scatter (sum) the gradients [padded] -> gshard [shard]: this
 *      rank's block of the summed gradient (the caller's buffer is used
 *      directly when n == padded, otherwise copied into the padded work buffer);
 *   2. sqnorm of the owned part of gshard (double), all-reduce (sum, fp64): every
 *      rank holds the same bits, so every rank takes the same decision;
 *   3. not finite -> report it and return, nothing touched (moments included);
 *   4. clip factor bk_clip_scale(sqnorm, grad_clip) passed to bk_adamw_step as its
 *      grad_scale (no extra pass over the gradients), on runs of equal decay mask;
 *   5. all-gather the shards of the parameters (bytes) into every rank's params.
 * Communication per rank and step: (P-1)/P * padded * 4 bytes in each of the
 * reduce-scatter and the all-gather, plus 8 bytes of norm. With bf16
 * parameters, step 4 updates the fp32 masters of the shard and writes them
 * rounded to bf16 in the same pass (bk_adamw_step_bf16), and step 5 gathers
 * the bf16 shards: 2 bytes per parameter instead of 4.
 *
 * On a device the same steps run on the queue (bk_copy, bk_fill, the AdamW
 * and norm kernels); the queue is drained before each collective, whose
 * device buffers must be complete when it starts. With the state on the host
 * (stages 2 and 3, bf16 parameters), the collectives still move the device's
 * ranges; each range's own part crosses through page-locked host memory: a
 * summed gradient range comes down into xfer on the queue's stream without
 * the host waiting, and is added into the block at the next range (or the
 * step), while the queue runs the backward of the ranges after it; the
 * updated shard (stage 2) goes up through xfer; at stage 3 a gathered range
 * goes up from `rounded`, the masters rounded to bf16 once per update (in
 * AdamW's pass) instead of once per gather. The norm and AdamW run on the
 * host's queue sq. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/device.h"
#include "kernels/ops.h"
#include "src/attn/kernel_status.h"
#include "src/train/zero.h"
#include "util/clock.h"

/* A run of the owned shard with one decay setting: [off, off + len) relative to
 * the shard's first element. */
typedef struct {
    int64_t off, len;
    int decay;
} decay_run;

struct zero {
    bt_comm *comm;
    bk_queue q;  /* the kernels' queue; the buffers below live in its memory */
    bk_queue sq; /* the state's (m, v, gshard, master, xfer): q, or the host's */
    bt_mem mem;
    int rank, size;
    int64_t n;          /* parameters */
    int64_t padded;     /* size * shard >= n */
    int64_t shard;      /* padded / size: the block each rank receives */
    int64_t begin, end; /* owned range of the flat index, end - begin <= shard */
    zero_hparams hp;
    decay_run *runs; /* [n_runs], covering [0, end - begin) in order */
    int n_runs;
    float *m, *v;  /* moments [end - begin] */
    float *gshard; /* summed gradient block [shard] */
    float *work;   /* [padded] when padded != n (gradients in, parameters out), else NULL */
    bk_dtype param_type;
    float *master;    /* bf16 parameters or stage 3: the fp32 masters [end - begin], else NULL */
    uint16_t *work16; /* bf16 parameters, padded != n: the all-gather's buffer [padded]
                       * (its padding stays zero), else NULL */
    zero_sharding sharding;
    /* State on the host, all page-locked: */
    void *xfer; /* one range's own part on its way [xfer_floats] */
    int64_t xfer_floats;
    uint16_t *rounded; /* stage 3: the masters in bf16 [end - begin], what gathers copy up */
    int rounded_stale; /* the masters were written since rounded was made */
    void *down_done;   /* event: the own part of the last range summed is down in xfer */
    int64_t pending_lo, pending_hi; /* that part's range, added into the block by zero_add_arrived;
                                       empty when none is on its way */
    /* Collectives still running (bt_iallreduce_mem), NULL when none: */
    bt_request *reducing;     /* the last range's sum (state on the device) */
    const float *pending_sum; /* where its own part [pending_lo, pending_hi) will be */
    bt_request *gathering;    /* the last gather started (zero_gather_start) */
    /* The model's side (zero_grad_sink, zero_param_source): */
    float *whole;           /* stage 1: the gradients [n] the sink writes (the caller's) */
    void *grad_windows[3];  /* stages 2 and 3: the gradients' windows, and */
    void *param_windows[3]; /* stage 3 the parameters': the embedding's, buckets 0 and 1 */
    model_grads sink;
    model_gather source;
    float fault;               /* the testing aid's gradient (zero_sink_fault), or 0 */
    double grad_sq;            /* the squares of the ranges the sink's hook handed on */
    double reduce_s, gather_s; /* the exposed times (zero_exposed_times) */
};

/* Which buffers a rank of z's shape needs (zero_sharding). */
typedef struct {
    int work, work16, master;
} zero_needs;

static zero_needs needs_of(const zero *z, bk_dtype param_type, zero_sharding sh)
{
    int padded = z->padded != z->n, bf16 = param_type == BK_BF16;
    return (zero_needs){.work = padded && (sh.stage == 1 || (sh.stage == 2 && !bf16)),
                        .work16 = padded && bf16 && sh.stage < 3,
                        .master = bf16 || sh.stage == 3};
}

/* Zeroed floats [count] in the memory of queue q, never NULL for a zero
 * count (NULL: out of memory). */
static float *qalloc(const bk_queue *q, int64_t count)
{
    float *p = NULL;
    return bk_alloc_floats(q, count, 0.0f, &p) == BK_OK ? p : NULL;
}

/* The same in z's memory, and in its state's. */
static float *zalloc(const zero *z, int64_t count)
{
    return qalloc(&z->q, count);
}
static float *salloc(const zero *z, int64_t count)
{
    return qalloc(&z->sq, count);
}

/* The shard, the padded length and the owned range of rank of size ranks. */
static void shard_of(int64_t n_params, int size, int rank, zero *z)
{
    z->shard = (n_params + size - 1) / size;
    z->padded = z->shard * size;
    int64_t b = (int64_t)rank * z->shard, e = b + z->shard;
    z->begin = b < n_params ? b : n_params;
    z->end = e < n_params ? e : n_params;
}

/* Floats of a bf16 buffer [count] (rounded up; one at least, as zalloc). */
static int64_t halves(int64_t count)
{
    return count > 1 ? (count + 1) / 2 : 1;
}

/* The host buffer a range's own part crosses (state on the host): the
 * longest range's floats, at most the shard's, and at stage 2 the updated
 * shard in bf16. */
static int64_t xfer_floats_of(const zero *z, zero_sharding sh)
{
    int64_t own = sh.range_floats < z->shard ? sh.range_floats : z->shard;
    int64_t f = sh.stage == 2 ? halves(z->shard) : 1;
    return own > f ? own : f;
}

/* The floats of the rounded masters (state on the host, stage 3). */
static int64_t rounded_floats_of(const zero *z, zero_sharding sh)
{
    return sh.state_on_host && sh.stage == 3 ? halves(z->end - z->begin) : 0;
}

/* Floats of the buffers zero_create makes for rank of size ranks: of the
 * state (moments, gradient block, masters, and on the host xfer and the
 * rounded masters) and of the rest (the padded work buffers), in the
 * optimizer's memory either. */
static void count_floats(int64_t n_params, int size, int rank, bk_dtype param_type,
                         zero_sharding sharding, int64_t *state, int64_t *rest)
{
    zero z = {0};
    z.n = n_params;
    shard_of(n_params, size, rank, &z);
    zero_needs need = needs_of(&z, param_type, sharding);
    int64_t own = z.end - z.begin;
    *state = 2 * (own > 0 ? own : 1) + (z.shard > 0 ? z.shard : 1);
    if (need.master) *state += own > 0 ? own : 1;
    if (sharding.state_on_host) *state += xfer_floats_of(&z, sharding);
    *state += rounded_floats_of(&z, sharding);
    *rest = 0;
    if (need.work) *rest += z.padded;
    if (need.work16) *rest += halves(z.padded);
}

size_t zero_bytes(int64_t n_params, int size, int rank, bk_dtype param_type, zero_sharding sharding)
{
    int64_t state, rest;
    count_floats(n_params, size, rank, param_type, sharding, &state, &rest);
    return (size_t)(sharding.state_on_host ? rest : state + rest) * sizeof(float);
}

size_t zero_host_bytes(int64_t n_params, int size, int rank, bk_dtype param_type,
                       zero_sharding sharding)
{
    int64_t state, rest;
    count_floats(n_params, size, rank, param_type, sharding, &state, &rest);
    return sharding.state_on_host ? (size_t)state * sizeof(float) : 0;
}

int zero_state_on_host(const zero *z)
{
    return z->sq.where == BK_HOST;
}

size_t zero_step_bytes(int64_t n_params, int size, zero_sharding sharding)
{
    if (sharding.stage >= 2) return zero_range_bytes(sharding.range_floats, size);
    zero z = {0};
    shard_of(n_params, size, 0, &z);
    return bt_reduce_scatter_bytes(size, (size_t)z.shard, BT_F32);
}

void zero_free(zero *z)
{
    if (!z) return;
    free(z->runs);
    /* collectives still running write device memory: wait for them (after
     * a failure the world's error ends the waits at once) */
    if (z->reducing) (void)bt_wait(&z->reducing);
    if (z->gathering) (void)bt_wait(&z->gathering);
    bk_free(&z->sq, z->m);
    bk_free(&z->sq, z->v);
    bk_free(&z->sq, z->gshard);
    bk_free(&z->sq, z->master);
    /* a download still on its way writes xfer */
    if (z->pending_hi > z->pending_lo) (void)bk_device_event_sync(z->down_done);
    if (z->down_done) bk_device_event_destroy(z->down_done);
    bk_host_pinned_free(z->xfer);
    bk_host_pinned_free(z->rounded);
    bk_free(&z->q, z->work);
    bk_free(&z->q, z->work16);
    for (int i = 0; i < 3; i++)
        bk_free(&z->q, z->grad_windows[i]), bk_free(&z->q, z->param_windows[i]);
    free(z);
}

static int hparams_valid(const zero_hparams *hp)
{
    return hp && hp->beta1 >= 0.0 && hp->beta1 < 1.0 && hp->beta2 >= 0.0 && hp->beta2 < 1.0 &&
           hp->eps >= 0.0 && hp->weight_decay >= 0.0 && isfinite(hp->weight_decay) &&
           hp->grad_clip >= 0.0 && isfinite(hp->grad_clip);
}

/* Runs of equal mask value over the owned range (one run when mask is NULL). */
static int build_runs(zero *z, const uint8_t *mask)
{
    int64_t own = z->end - z->begin;
    if (own == 0) return 0;
    int64_t count = 1;
    if (mask)
        for (int64_t i = z->begin + 1; i < z->end; i++)
            count += (mask[i] != 0) != (mask[i - 1] != 0);
    if (count > INT32_MAX) return -1;
    z->runs = malloc((size_t)count * sizeof *z->runs);
    if (!z->runs) return -1;
    int k = 0;
    int64_t start = 0;
    for (int64_t i = 1; i <= own; i++) {
        int cur = mask ? mask[z->begin + start] != 0 : 1;
        if (i == own || (mask && (mask[z->begin + i] != 0) != cur)) {
            z->runs[k].off = start;
            z->runs[k].len = i - start;
            z->runs[k].decay = cur;
            k++;
            start = i;
        }
    }
    z->n_runs = k;
    return 0;
}

/* State on the host: its page-locked buffers (xfer, and at stage 3 the
 * rounded masters) and the download's event; 0 or -1. */
static int host_state_buffers(zero *z)
{
    z->xfer_floats = xfer_floats_of(z, z->sharding);
    int64_t rounded = rounded_floats_of(z, z->sharding);
    z->rounded_stale = 1;
    return bk_host_pinned_malloc((size_t)z->xfer_floats * sizeof(float), &z->xfer) == BK_OK &&
                   (rounded == 0 || bk_host_pinned_malloc((size_t)rounded * sizeof(float),
                                                          (void **)&z->rounded) == BK_OK) &&
                   bk_device_event_create(&z->down_done) == BK_OK
               ? 0
               : -1;
}

zero *zero_create(bt_comm *comm, int64_t n_params, const uint8_t *decay_mask,
                  const zero_hparams *hp, const bk_queue *q, bk_dtype param_type,
                  zero_sharding sharding)
{
    if (!comm) return NULL;
    zero *z = calloc(1, sizeof *z);
    int host_state_ok =
        !sharding.state_on_host || (q && q->where == BK_DEVICE && param_type == BK_BF16 &&
                                    sharding.stage >= 2 && sharding.range_floats >= 0);
    int ok = z != NULL && n_params >= 0 && hparams_valid(hp) &&
             (param_type == BK_F32 || param_type == BK_BF16) && sharding.stage >= 1 &&
             sharding.stage <= 3 && host_state_ok;
    if (ok) {
        z->q = q ? *q : bk_host_queue();
        z->sq = sharding.state_on_host ? bk_host_queue() : z->q;
        z->mem = z->q.where == BK_DEVICE ? BT_MEM_DEVICE : BT_MEM_HOST;
        z->comm = comm;
        z->rank = bt_comm_rank(comm);
        z->size = bt_comm_size(comm);
        z->n = n_params;
        shard_of(n_params, z->size, z->rank, z);
        z->hp = *hp;
        int64_t own = z->end - z->begin;
        z->sharding = sharding;
        z->param_type = param_type;
        zero_needs need = needs_of(z, param_type, sharding);
        z->m = salloc(z, own);
        z->v = salloc(z, own);
        z->gshard = salloc(z, z->shard);
        if (sharding.state_on_host) ok = host_state_buffers(z) == 0;
        if (need.work) z->work = zalloc(z, z->padded);
        if (need.master) z->master = salloc(z, own);
        /* zeroed, so the padding the all-gather carries is zeros */
        if (need.work16) z->work16 = (uint16_t *)zalloc(z, halves(z->padded));
        ok = ok && z->m && z->v && z->gshard && (!need.work || z->work) &&
             (!need.master || z->master) && (!need.work16 || z->work16) &&
             build_runs(z, decay_mask) == 0;
    }
    /* Every rank must agree on the size and on success, or none proceeds:
     * [n, -n, failed] reduced with MAX. */
    int64_t agree[3] = {n_params, -n_params, ok ? 0 : 1};
    if (bt_allreduce(comm, agree, 3, BT_I64, BT_MAX) != BT_OK || agree[2] != 0 ||
        agree[0] != -agree[1]) {
        zero_free(z);
        return NULL;
    }
    return z;
}

/* On a device, waits for the queue: a collective's buffers must be complete. */
static bk_status queue_drained(const zero *z)
{
    return z->mem == BT_MEM_DEVICE ? bk_device_sync(&z->q) : BK_OK;
}

bt_status zero_add_arrived(zero *z)
{
    if (!z) return BT_ERR_ARG;
    int64_t lo = z->pending_lo, hi = z->pending_hi;
    bt_status st = z->reducing ? bt_wait(&z->reducing) : BT_OK;
    if (st != BT_OK || hi <= lo) return st;
    z->pending_lo = z->pending_hi = 0;
    if (!z->xfer) { /* the sum is on the device: its own part joins the block */
        CHECK_KERNEL(bk_axpy(&z->q, hi - lo, 1.0f, z->pending_sum, z->gshard + (lo - z->begin)));
        return BT_OK;
    }
    CHECK_KERNEL(bk_device_event_sync(z->down_done));
    CHECK_KERNEL(bk_axpy(&z->sq, hi - lo, 1.0f, z->xfer, z->gshard + (lo - z->begin)));
    return BT_OK;
}

bt_status zero_clear_gradients(zero *z)
{
    if (!z) return BT_ERR_ARG;
    bt_status st = zero_add_arrived(z); /* the block's last sum, cleared with it */
    if (st != BT_OK) return st;
    CHECK_KERNEL(bk_fill(&z->sq, z->shard, z->gshard, 0.0f));
    return BT_OK;
}

bt_status zero_add_range(zero *z, float *grad, int64_t begin, int64_t end)
{
    if (!z || begin < 0 || end < begin || end > z->n || (end > begin && !grad)) return BT_ERR_ARG;
    int64_t lo = begin > z->begin ? begin : z->begin, hi = end < z->end ? end : z->end;
    if (z->xfer && hi - lo > z->xfer_floats) return BT_ERR_ARG;
    /* the last range's sum joins the block: on the host while the queue
     * runs what the caller queued after it (the backward of this range) */
    bt_status st = zero_add_arrived(z);
    if (st != BT_OK) return st;
    CHECK_KERNEL(queue_drained(z));
    const float *sum = grad + (lo - begin);
    if (!z->xfer) { /* the sum comes while the caller queues its next work */
        st = bt_iallreduce_mem(z->comm, grad, (size_t)(end - begin), BT_F32, BT_SUM, z->mem,
                               &z->reducing);
        if (st != BT_OK || lo >= hi) return st;
        z->pending_sum = sum, z->pending_lo = lo, z->pending_hi = hi;
        return z->reducing ? BT_OK : zero_add_arrived(z); /* here already: added now */
    }
    st = bt_allreduce_mem(z->comm, grad, (size_t)(end - begin), BT_F32, BT_SUM, z->mem);
    if (st != BT_OK || lo >= hi) return st;
    /* the state on the host: this rank's part comes down on the queue's
     * stream, ahead of whatever the caller writes into grad next */
    CHECK_KERNEL(bk_device_download_async(&z->q, z->xfer, sum, (size_t)(hi - lo) * sizeof(float)));
    CHECK_KERNEL(bk_device_event_record(z->down_done, &z->q));
    z->pending_lo = lo;
    z->pending_hi = hi;
    return BT_OK;
}

size_t zero_range_bytes(int64_t count, int size)
{
    return bt_allreduce_bytes(size, (size_t)count, BT_F32);
}

/* Steps 1 to 3: the summed gradient block of this rank in gshard (there
 * already when grads is NULL), and the global squared norm in *sq
 * (*grad_norm its root). BT_OK with a non-finite norm: the caller updates
 * nothing. */
static bt_status reduce_gradients(zero *z, float *grads, double *sq, double *grad_norm)
{
    const bk_queue *q = &z->q;
    if (grads && z->xfer) return BT_ERR_ARG; /* the state on the host sums range by range */
    int64_t own = z->end - z->begin;
    bt_status st = zero_add_arrived(z);
    if (st != BT_OK) return st;
    /* 1. Reduce-scatter the summed gradient: gshard[shard] = block rank of the sum. */
    const float *send = grads;
    if (grads && z->work) {
        CHECK_KERNEL(bk_copy(q, z->work, grads, (size_t)z->n * sizeof(float)));
        CHECK_KERNEL(bk_fill(q, z->padded - z->n, z->work + z->n, 0.0f));
        send = z->work;
    }
    CHECK_KERNEL(queue_drained(z));
    if (grads)
        st = bt_reduce_scatter_mem(z->comm, send, z->gshard, (size_t)z->shard, BT_F32, BT_SUM,
                                   z->mem);
    if (st != BT_OK) return st;

    /* 2. Global squared norm, identical on every rank. */
    const float *bufs[1] = {z->gshard};
    *sq = 0.0;
    CHECK_KERNEL(bk_grad_sqnorm(&z->sq, 1, bufs, &own, sq));
    st = bt_allreduce(z->comm, sq, 1, BT_F64, BT_SUM);
    *grad_norm = sqrt(*sq);
    return st;
}

/* Step 4: AdamW on the owned shard's parameters shard[end - begin] (fp32),
 * the clipping factor folded into grad_scale; with rounded, the same values
 * rounded to bf16 into rounded[end - begin] in the same pass. */
static bt_status update_shard(zero *z, float *shard, uint16_t *rounded, double lr, int64_t step,
                              double sq)
{
    float scale = z->hp.grad_clip > 0.0 ? bk_clip_scale(sq, z->hp.grad_clip) : 1.0f;
    bk_adamw_params ap = {(float)lr, (float)z->hp.beta1, (float)z->hp.beta2, (float)z->hp.eps,
                          (float)z->hp.weight_decay};
    for (int k = 0; k < z->n_runs; k++) {
        const decay_run *r = &z->runs[k];
        ap.weight_decay = r->decay ? (float)z->hp.weight_decay : 0.0f;
        float *p = shard + r->off, *m = z->m + r->off, *v = z->v + r->off;
        const float *g = z->gshard + r->off;
        if (rounded)
            CHECK_KERNEL(
                bk_adamw_step_bf16(&z->sq, r->len, p, g, m, v, &ap, step, scale, rounded + r->off));
        else
            CHECK_KERNEL(bk_adamw_step(&z->sq, r->len, p, g, m, v, &ap, step, scale));
    }
    return BT_OK;
}

static int step_args_ok(const zero *z, const void *params, double lr, int64_t step,
                        const double *grad_norm)
{
    return z && grad_norm && step >= 1 && lr >= 0.0 && isfinite(lr) &&
           (z->n == 0 || z->sharding.stage == 3 || params);
}

/* Step 5 with fp32 parameters: every rank's shard into params [n], in place
 * when unpadded, else through work. */
static bt_status gather_f32(zero *z, float *params)
{
    const size_t fsz = sizeof(float);
    const bk_queue *q = &z->q;
    int64_t own = z->end - z->begin;
    if (!z->work) {
        CHECK_KERNEL(queue_drained(z));
        return bt_allgather_mem(z->comm, params + (int64_t)z->rank * z->shard, params,
                                (size_t)z->shard * fsz, z->mem);
    }
    float *slot = z->work + (int64_t)z->rank * z->shard;
    CHECK_KERNEL(bk_copy(q, slot, params + z->begin, (size_t)own * fsz));
    CHECK_KERNEL(bk_fill(q, z->shard - own, slot + own, 0.0f));
    CHECK_KERNEL(queue_drained(z));
    bt_status st = bt_allgather_mem(z->comm, slot, z->work, (size_t)z->shard * fsz, z->mem);
    if (st != BT_OK) return st;
    CHECK_KERNEL(bk_copy(q, params, z->work, (size_t)z->n * fsz));
    return BT_OK;
}

/* Steps 4 and 5 with bf16 parameters: the masters of the shard updated, and
 * rounded to bf16 in the same pass into every rank's params [n] (all-gathered),
 * or at stage 3 into the host's rounded masters. */
static bt_status update_bf16(zero *z, uint16_t *params, double lr, int64_t step, double sq)
{
    bt_status st;
    if (z->sharding.stage == 3) { /* the rounded masters of the host made in the same pass */
        st = update_shard(z, z->master, z->rounded, lr, step, sq);
        z->rounded_stale = st != BT_OK;
        return st;
    }
    /* the bf16 shard is written where the all-gather takes it from: in place
     * when unpadded, else into work16, whose padding stays zero */
    uint16_t *gathered = z->work16 ? z->work16 : params;
    uint16_t *slot = gathered + (int64_t)z->rank * z->shard;
    /* the state on the host: rounded there, then up into the slot */
    st = update_shard(z, z->master, z->xfer ? (uint16_t *)z->xfer : slot, lr, step, sq);
    if (st != BT_OK) return st;
    if (z->xfer)
        CHECK_KERNEL(bk_device_upload(&z->q, slot, z->xfer, (size_t)(z->end - z->begin) * 2));
    CHECK_KERNEL(queue_drained(z));
    st = bt_allgather_mem(z->comm, slot, gathered, (size_t)z->shard * 2, z->mem);
    if (st == BT_OK && z->work16) CHECK_KERNEL(bk_copy(&z->q, params, z->work16, (size_t)z->n * 2));
    return st;
}

bt_status zero_step(zero *z, void *params, float *grads, double lr, int64_t step, double *grad_norm)
{
    if (!step_args_ok(z, params, lr, step, grad_norm)) return BT_ERR_ARG;
    double sq = 0.0;
    bt_status st = reduce_gradients(z, grads, &sq, grad_norm);
    /* 3. A non-finite gradient: every rank sees it; nothing is updated. */
    if (st != BT_OK || !isfinite(*grad_norm)) return st;
    if (z->param_type == BK_BF16) return update_bf16(z, params, lr, step, sq);
    if (z->sharding.stage == 3) return update_shard(z, z->master, NULL, lr, step, sq);
    st = update_shard(z, (float *)params + z->begin, NULL, lr, step, sq);
    return st == BT_OK ? gather_f32(z, params) : st;
}

float *zero_masters(zero *z)
{
    if (z) z->rounded_stale = 1; /* the caller may write them */
    return z ? z->master : NULL;
}

int zero_set_masters(zero *z, const float *own)
{
    if (!z || z->sharding.stage != 3 || (z->end > z->begin && !own)) return -1;
    size_t bytes = (size_t)(z->end - z->begin) * sizeof(float);
    z->rounded_stale = 1;
    if (!zero_state_on_host(z))
        return bk_device_upload(&z->q, z->master, own, bytes) == BK_OK ? 0 : -1;
    memcpy(z->master, own, bytes);
    return 0;
}

int zero_set_params(zero *z, const float *full, uint16_t *params)
{
    int whole16 = z && z->param_type == BK_BF16 && z->sharding.stage < 3;
    if (!z || !z->master || (z->n > 0 && (!full || (whole16 && !params)))) return -1;
    size_t own_bytes = (size_t)(z->end - z->begin) * sizeof(float);
    if (!whole16) return zero_set_masters(z, full + z->begin); /* stage 3: the masters alone */
    uint16_t *rounded = malloc((size_t)(z->n > 0 ? z->n : 1) * 2);
    bk_queue host = bk_host_queue();
    int failed = !rounded || bk_round_bf16(&host, z->n, full, rounded) != BK_OK;
    if (!failed && zero_state_on_host(z))
        memcpy(z->master, full + z->begin, own_bytes);
    else if (!failed)
        failed = bk_device_upload(&z->q, z->master, full + z->begin, own_bytes) != BK_OK;
    if (!failed && z->mem == BT_MEM_DEVICE)
        failed = bk_device_upload(&z->q, params, rounded, (size_t)z->n * 2) != BK_OK;
    else if (!failed)
        memcpy(params, rounded, (size_t)z->n * 2);
    free(rounded);
    return failed ? -1 : 0;
}

size_t zero_window_bytes(int64_t count, bk_dtype param_type)
{
    size_t bytes = (size_t)(count > 0 ? count : 0) * (param_type == BK_BF16 ? 2 : 4);
    return (bytes + 7) / 8 * 8;
}

bt_status zero_gather_range(zero *z, void *window, int64_t begin, int64_t end)
{
    bt_status st = zero_gather_start(z, window, begin, end);
    return st == BT_OK ? zero_gather_arrived(z) : st;
}

bt_status zero_gather_arrived(zero *z)
{
    if (!z) return BT_ERR_ARG;
    return z->gathering ? bt_wait(&z->gathering) : BT_OK;
}

bt_status zero_gather_start(zero *z, void *window, int64_t begin, int64_t end)
{
    if (!z || z->gathering || z->sharding.stage != 3 || begin < 0 || end < begin || end > z->n ||
        (end > begin && (!window || (uintptr_t)window % 8 != 0)))
        return BT_ERR_ARG;
    int bf16 = z->param_type == BK_BF16;
    size_t words = zero_window_bytes(end - begin, z->param_type) / 8;
    int64_t lo = begin > z->begin ? begin : z->begin, hi = end < z->end ? end : z->end;
    /* zeros (fp32 zeros are zero bits), then this rank's own bits */
    CHECK_KERNEL(bk_fill(&z->q, (int64_t)words * 2, window, 0.0f));
    uint16_t *own16 = (uint16_t *)window + (lo - begin);
    if (lo < hi && z->rounded) { /* the state on the host: up from its rounded masters */
        if (z->rounded_stale)
            CHECK_KERNEL(bk_round_bf16(&z->sq, z->end - z->begin, z->master, z->rounded));
        z->rounded_stale = 0;
        CHECK_KERNEL(bk_device_upload_async(&z->q, own16, z->rounded + (lo - z->begin),
                                            (size_t)(hi - lo) * 2));
    } else if (lo < hi && bf16)
        CHECK_KERNEL(bk_round_bf16(&z->q, hi - lo, z->master + (lo - z->begin), own16));
    else if (lo < hi)
        CHECK_KERNEL(bk_copy(&z->q, (float *)window + (lo - begin), z->master + (lo - z->begin),
                             (size_t)(hi - lo) * sizeof(float)));
    CHECK_KERNEL(queue_drained(z));
    return bt_iallreduce_mem(z->comm, window, words, BT_I64, BT_SUM, z->mem, &z->gathering);
}

bt_status zero_gather_params(zero *z, float *full)
{
    if (!z || !z->master) return BT_ERR_ARG;
    int64_t own = z->end - z->begin;
    float *all = z->padded == z->n || !full ? full : calloc((size_t)z->padded, sizeof(float));
    /* the ranks agree that each has its buffer, so that none waits for one without */
    int64_t missing = all == NULL && z->padded > 0;
    bt_status st = bt_allreduce(z->comm, &missing, 1, BT_I64, BT_MAX);
    if (st != BT_OK || missing) {
        if (all != full) free(all);
        return st != BT_OK ? st : BT_ERR_SYS;
    }
    float *slot = all + (int64_t)z->rank * z->shard;
    bk_status kst = BK_OK;
    if (!zero_state_on_host(z))
        kst = bk_device_download(&z->q, slot, z->master, (size_t)own * sizeof(float));
    else
        memcpy(slot, z->master, (size_t)own * sizeof(float));
    memset(slot + own, 0, (size_t)(z->shard - own) * sizeof(float));
    st = attn_kernel_status(kst);
    /* a rank whose copy failed still takes part, so that none waits for it */
    bt_status gst =
        bt_allgather_mem(z->comm, slot, all, (size_t)z->shard * sizeof(float), BT_MEM_HOST);
    if (st == BT_OK) st = gst;
    if (all != full) {
        if (st == BT_OK) memcpy(full, all, (size_t)z->n * sizeof(float));
        free(all);
    }
    return st;
}

void zero_shard(const zero *z, int64_t *begin, int64_t *end)
{
    if (begin) *begin = z->begin;
    if (end) *end = z->end;
}

size_t zero_state_bytes(const zero *z)
{
    return 2 * (size_t)(z->end - z->begin) * sizeof(float);
}

float *zero_moment1(zero *z)
{
    return z->m;
}
float *zero_moment2(zero *z)
{
    return z->v;
}

void zero_window_floats(const model_layout *m, int64_t floats[3])
{
    floats[0] = model_embed_floats(m);
    for (int k = 0; k < 2; k++) floats[1 + k] = model_bucket_floats(m, k);
}

zero_sharding zero_sharding_for(const model_layout *m, int stage, int state_on_host)
{
    int64_t floats[3], most = 0;
    zero_window_floats(m, floats);
    for (int i = 0; i < 3; i++)
        if (floats[i] > most) most = floats[i];
    return (zero_sharding){.stage = stage, .state_on_host = state_on_host, .range_floats = most};
}

void zero_model_bytes(const model_layout *m, bk_dtype param_type, int stage, size_t *params,
                      size_t *grads)
{
    int64_t floats[3], windows = 0, n = m->n_params;
    size_t param_windows = 0;
    zero_window_floats(m, floats);
    for (int i = 0; i < 3; i++)
        windows += floats[i], param_windows += zero_window_bytes(floats[i], param_type);
    *grads = (size_t)(stage >= 2 ? windows : n) * sizeof(float);
    *params = stage == 3              ? param_windows
              : param_type == BK_BF16 ? (size_t)(n + 1) / 2 * sizeof(float)
                                      : (size_t)n * sizeof(float);
}

/* m's windows into w[3], zeroed floats in z's memory: the parameters' (of
 * their type, in whole words) or the gradients' (fp32); 0, or -1 with
 * *failed_bytes. */
static int make_windows(zero *z, const model_layout *m, int params, void *w[3],
                        size_t *failed_bytes)
{
    int64_t floats[3];
    zero_window_floats(m, floats);
    for (int i = 0; i < 3; i++) {
        size_t bytes = params ? zero_window_bytes(floats[i], z->param_type)
                              : (size_t)floats[i] * sizeof(float);
        if (!(w[i] = zalloc(z, (int64_t)(bytes / sizeof(float))))) {
            *failed_bytes = bytes;
            return -1;
        }
    }
    return 0;
}

int zero_make_param_windows(zero *z, const model_layout *m, size_t *failed_bytes)
{
    return z->sharding.stage < 3 ? 0 : make_windows(z, m, 1, z->param_windows, failed_bytes);
}

int zero_make_grad_windows(zero *z, const model_layout *m, size_t *failed_bytes)
{
    return z->sharding.stage < 2 ? 0 : make_windows(z, m, 0, z->grad_windows, failed_bytes);
}

/* The sink's hook (stages 2 and 3): the micro-batch's gradients of
 * [begin, end) are whole in grad. The testing aid's fault goes into the
 * first parameter's, as it would into the whole buffer; the squares join
 * this rank's finiteness check (before the reduction, as at stage 1); the
 * range is summed over the ranks into the block. */
static bt_status sink_range(void *ctx, float *grad, int64_t begin, int64_t end)
{
    zero *z = ctx;
    /* the last range's part, on the host, before the norm below waits for the queue */
    double start = bu_now();
    bt_status st = zero_add_arrived(z);
    z->reduce_s += bu_now() - start;
    if (st != BT_OK) return st;
    if (begin == 0 && end > 0 && z->fault != 0.0f) CHECK_KERNEL(bk_fill(&z->q, 1, grad, z->fault));
    const float *bufs[1] = {grad};
    int64_t count = end - begin;
    double sq = 0;
    CHECK_KERNEL(bk_grad_sqnorm(&z->q, 1, bufs, &count, &sq));
    z->grad_sq += sq;
    start = bu_now();
    st = zero_add_range(z, grad, begin, end);
    z->reduce_s += bu_now() - start;
    return st;
}

const model_grads *zero_grad_sink(zero *z, float *whole)
{
    void **w = z->grad_windows;
    z->whole = z->sharding.stage == 1 ? whole : NULL;
    if (z->sharding.stage == 1)
        z->sink = (model_grads){whole, NULL, {NULL, NULL}, NULL, NULL};
    else
        z->sink = (model_grads){NULL, w[0], {w[1], w[2]}, sink_range, z};
    return &z->sink;
}

bt_status zero_sink_clear(zero *z)
{
    if (!z) return BT_ERR_ARG;
    z->grad_sq = 0, z->fault = 0.0f;
    if (z->sharding.stage >= 2) {
        bt_status st = zero_clear_gradients(z);
        if (st != BT_OK) return st;
    } else
        CHECK_KERNEL(bk_fill(&z->q, z->n, z->whole, 0.0f));
    z->reduce_s = z->gather_s = 0;
    return BT_OK;
}

bt_status zero_sink_arrived(zero *z)
{
    if (!z) return BT_ERR_ARG;
    if (z->sharding.stage < 2) return BT_OK;
    double start = bu_now();
    bt_status st = zero_add_arrived(z);
    z->reduce_s += bu_now() - start;
    return st;
}

bt_status zero_sink_sqnorm(zero *z, double *sq)
{
    if (!z || !sq) return BT_ERR_ARG;
    *sq = z->grad_sq;
    if (z->sharding.stage >= 2) return BT_OK;
    if (z->fault != 0.0f) CHECK_KERNEL(bk_fill(&z->q, 1, z->whole, z->fault));
    const float *bufs[1] = {z->whole};
    int64_t count = z->n;
    CHECK_KERNEL(bk_grad_sqnorm(&z->q, 1, bufs, &count, sq));
    return BT_OK;
}

void zero_sink_fault(zero *z, float value)
{
    if (z) z->fault = value;
}

/* The source's hooks (stage 3): a range of the parameters into its window
 * from every rank's masters, in two halves, the host's time in both the
 * gathers' exposed time. */
static bt_status source_start(void *ctx, void *window, int64_t begin, int64_t end)
{
    zero *z = ctx;
    double start = bu_now();
    bt_status st = zero_gather_start(z, window, begin, end);
    z->gather_s += bu_now() - start;
    return st;
}

static bt_status source_wait(void *ctx)
{
    zero *z = ctx;
    double start = bu_now();
    bt_status st = zero_gather_arrived(z);
    z->gather_s += bu_now() - start;
    return st;
}

const model_gather *zero_param_source(zero *z)
{
    if (!z || z->sharding.stage != 3) return NULL;
    void **w = z->param_windows;
    z->source = (model_gather){w[0], {w[1], w[2]}, source_start, source_wait, z};
    return &z->source;
}

void zero_exposed_times(const zero *z, double *reduce_s, double *gather_s)
{
    *reduce_s = z->reduce_s;
    *gather_s = z->gather_s;
}

/* Warm-up: lr * step / warmup for step in [1, warmup] (lr / warmup at step 1, lr
 * at step warmup); the warm-up wins over the end of the schedule when
 * total_steps <= warmup. Then cosine from lr (step warmup) to min_lr (step
 * total_steps); min_lr after. warmup = 0 starts the cosine at lr at step 0. */
double lr_schedule(double lr, double min_lr, int64_t warmup, int64_t total_steps, int64_t step)
{
    if (warmup > 0 && step <= warmup) return step <= 0 ? 0.0 : lr * (double)step / (double)warmup;
    if (step >= total_steps) return min_lr;
    if (step <= warmup) return lr; /* warmup == 0 and step <= 0 */
    double progress = (double)(step - warmup) / (double)(total_steps - warmup);
    return min_lr + 0.5 * (lr - min_lr) * (1.0 + cos(3.14159265358979323846 * progress));
}
