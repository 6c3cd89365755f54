/* optimizer.c: AdamW with ZeRO-1 over a communicator, and the learning-rate
 * schedule; see optimizer.h.
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
 * reduce-scatter and the all-gather, plus 8 bytes of norm.
 *
 * On a device the same steps run on the queue (bk_copy, bk_fill, the AdamW
 * and norm kernels); the queue is drained before each collective, whose
 * device buffers must be complete when it starts. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/device.h"
#include "kernels/ops.h"
#include "src/train/optimizer.h"

/* A run of the owned shard with one decay setting: [off, off + len) relative to
 * the shard's first element. */
typedef struct {
    int64_t off, len;
    int decay;
} decay_run;

struct zero1 {
    bt_comm *comm;
    bk_queue q;   /* the kernels' queue; the buffers below live in its memory */
    bt_mem mem;
    int rank, size;
    int64_t n;          /* parameters */
    int64_t padded;     /* size * shard >= n */
    int64_t shard;      /* padded / size: the block each rank receives */
    int64_t begin, end; /* owned range of the flat index, end - begin <= shard */
    zero1_hparams hp;
    decay_run *runs; /* [n_runs], covering [0, end - begin) in order */
    int n_runs;
    float *m, *v;  /* moments [end - begin] */
    float *gshard; /* summed gradient block [shard] */
    float *work;   /* [padded] when padded != n (gradients in, parameters out), else NULL */
};

/* Zeroed floats [count] in z's memory, never NULL for a zero count (NULL:
 * out of memory). */
static float *zalloc(const zero1 *z, int64_t count)
{
    float *p = NULL;
    return bk_alloc_floats(&z->q, count, 0.0f, &p) == BK_OK ? p : NULL;
}

/* The shard, the padded length and the owned range of rank of size ranks. */
static void shard_of(int64_t n_params, int size, int rank, zero1 *z)
{
    z->shard = (n_params + size - 1) / size;
    z->padded = z->shard * size;
    int64_t b = (int64_t)rank * z->shard, e = b + z->shard;
    z->begin = b < n_params ? b : n_params;
    z->end = e < n_params ? e : n_params;
}

size_t zero1_bytes(int64_t n_params, int size, int rank)
{
    zero1 z = {0};
    shard_of(n_params, size, rank, &z);
    int64_t own = z.end - z.begin, floats = 2 * (own > 0 ? own : 1) + (z.shard > 0 ? z.shard : 1);
    if (z.padded != n_params) floats += z.padded;
    return (size_t)floats * sizeof(float);
}

size_t zero1_step_bytes(int64_t n_params, int size)
{
    zero1 z = {0};
    shard_of(n_params, size, 0, &z);
    return bt_reduce_scatter_bytes(size, (size_t)z.shard, BT_F32);
}

void zero1_free(zero1 *z)
{
    if (!z) return;
    free(z->runs);
    bk_free(&z->q, z->m);
    bk_free(&z->q, z->v);
    bk_free(&z->q, z->gshard);
    bk_free(&z->q, z->work);
    free(z);
}

static int hparams_valid(const zero1_hparams *hp)
{
    return hp && hp->beta1 >= 0.0 && hp->beta1 < 1.0 && hp->beta2 >= 0.0 && hp->beta2 < 1.0 &&
           hp->eps >= 0.0 && hp->weight_decay >= 0.0 && isfinite(hp->weight_decay) &&
           hp->grad_clip >= 0.0 && isfinite(hp->grad_clip);
}

/* Runs of equal mask value over the owned range (one run when mask is NULL). */
static int build_runs(zero1 *z, const uint8_t *mask)
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

zero1 *zero1_create(bt_comm *comm, int64_t n_params, const uint8_t *decay_mask,
                    const zero1_hparams *hp, const bk_queue *q)
{
    if (!comm) return NULL;
    zero1 *z = calloc(1, sizeof *z);
    int ok = z != NULL && n_params >= 0 && hparams_valid(hp);
    if (ok) {
        z->q = q ? *q : bk_host_queue();
        z->mem = z->q.where == BK_DEVICE ? BT_MEM_DEVICE : BT_MEM_HOST;
        z->comm = comm;
        z->rank = bt_comm_rank(comm);
        z->size = bt_comm_size(comm);
        z->n = n_params;
        shard_of(n_params, z->size, z->rank, z);
        z->hp = *hp;
        int64_t own = z->end - z->begin;
        z->m = zalloc(z, own);
        z->v = zalloc(z, own);
        z->gshard = zalloc(z, z->shard);
        if (z->padded != n_params) z->work = zalloc(z, z->padded);
        ok = z->m && z->v && z->gshard && (z->padded == n_params || z->work) &&
             build_runs(z, decay_mask) == 0;
    }
    /* Every rank must agree on the size and on success, or none proceeds:
     * [n, -n, failed] reduced with MAX. */
    int64_t agree[3] = {n_params, -n_params, ok ? 0 : 1};
    if (bt_allreduce(comm, agree, 3, BT_I64, BT_MAX) != BT_OK || agree[2] != 0 ||
        agree[0] != -agree[1]) {
        zero1_free(z);
        return NULL;
    }
    return z;
}

/* A failed kernel: the arguments were checked, so the device failed. */
#define KERNEL(call)                                                                               \
    do {                                                                                           \
        if ((call) != BK_OK) return BT_ERR_SYS;                                                    \
    } while (0)

/* On a device, waits for the queue: a collective's buffers must be complete. */
static bk_status queue_drained(const zero1 *z)
{
    return z->mem == BT_MEM_DEVICE ? bk_device_sync(&z->q) : BK_OK;
}

bt_status zero1_step(zero1 *z, float *params, float *grads, double lr, int64_t step,
                     double *grad_norm)
{
    if (!z || !grad_norm || step < 1 || !(lr >= 0.0) || !isfinite(lr) ||
        (z->n > 0 && (!params || !grads)))
        return BT_ERR_ARG;
    const size_t fsz = sizeof(float);
    const bk_queue *q = &z->q;
    int64_t own = z->end - z->begin;

    /* 1. Reduce-scatter the summed gradient: gshard[shard] = block rank of the sum. */
    const float *send = grads;
    if (z->work) {
        KERNEL(bk_copy(q, z->work, grads, (size_t)z->n * fsz));
        KERNEL(bk_fill(q, z->padded - z->n, z->work + z->n, 0.0f));
        send = z->work;
    }
    KERNEL(queue_drained(z));
    bt_status st = bt_reduce_scatter_mem(z->comm, send, z->gshard, (size_t)z->shard, BT_F32, BT_SUM,
                                         z->mem);
    if (st != BT_OK) return st;

    /* 2. Global squared norm, identical on every rank. */
    const float *bufs[1] = {z->gshard};
    double sq = 0.0;
    KERNEL(bk_grad_sqnorm(q, 1, bufs, &own, &sq));
    st = bt_allreduce(z->comm, &sq, 1, BT_F64, BT_SUM);
    if (st != BT_OK) return st;
    double norm = sqrt(sq);
    *grad_norm = norm;

    /* 3. A non-finite gradient: every rank sees it; nothing is updated. */
    if (!isfinite(norm)) return BT_OK;

    /* 4. AdamW on the owned shard, the clipping factor folded into grad_scale. */
    float scale = z->hp.grad_clip > 0.0 ? bk_clip_scale(sq, z->hp.grad_clip) : 1.0f;
    bk_adamw_params ap = {(float)lr, (float)z->hp.beta1, (float)z->hp.beta2, (float)z->hp.eps,
                          (float)z->hp.weight_decay};
    for (int k = 0; k < z->n_runs; k++) {
        const decay_run *r = &z->runs[k];
        ap.weight_decay = r->decay ? (float)z->hp.weight_decay : 0.0f;
        KERNEL(bk_adamw_step(q, r->len, params + z->begin + r->off, z->gshard + r->off,
                             z->m + r->off, z->v + r->off, &ap, step, scale));
    }

    /* 5. All-gather the parameters: in place when unpadded, else through work. */
    if (!z->work) {
        KERNEL(queue_drained(z));
        return bt_allgather_mem(z->comm, params + (int64_t)z->rank * z->shard, params,
                                (size_t)z->shard * fsz, z->mem);
    }
    float *slot = z->work + (int64_t)z->rank * z->shard;
    KERNEL(bk_copy(q, slot, params + z->begin, (size_t)own * fsz));
    KERNEL(bk_fill(q, z->shard - own, slot + own, 0.0f));
    KERNEL(queue_drained(z));
    st = bt_allgather_mem(z->comm, slot, z->work, (size_t)z->shard * fsz, z->mem);
    if (st != BT_OK) return st;
    KERNEL(bk_copy(q, params, z->work, (size_t)z->n * fsz));
    return BT_OK;
}

void zero1_shard(const zero1 *z, int64_t *begin, int64_t *end)
{
    if (begin) *begin = z->begin;
    if (end) *end = z->end;
}

size_t zero1_state_bytes(const zero1 *z)
{
    return 2 * (size_t)(z->end - z->begin) * sizeof(float);
}

float *zero1_moment1(zero1 *z)
{
    return z->m;
}
float *zero1_moment2(zero1 *z)
{
    return z->v;
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
