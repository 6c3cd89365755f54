/* choices.c: see choices.h. The values compared here are the ones config.c
 * parses its keys' names to (config.h). */
#include <stdio.h>

#include "src/attn/sparse_pattern.h"
#include "src/train/choices.h"

seq_layout_kind choose_layout(train_layout_choice layout, train_mask_choice mask)
{
    if (layout == LAYOUT_CHOICE_ZIGZAG) return LAYOUT_ZIGZAG;
    if (layout == LAYOUT_CHOICE_CONTIGUOUS) return LAYOUT_CONTIGUOUS;
    return mask == MASK_CHOICE_CAUSAL ? LAYOUT_ZIGZAG : LAYOUT_CONTIGUOUS;
}

bk_attn_mask choose_mask(train_mask_choice mask, int64_t window)
{
    if (mask == MASK_CHOICE_DOCUMENT) return bk_attn_mask_document(1);
    bk_attn_mask m = bk_attn_mask_causal();
    if (mask == MASK_CHOICE_WINDOW) {
        m = bk_attn_mask_window(window - 1, 0);
        m.flags |= BK_ATTN_CAUSAL;
    } else if (mask == MASK_CHOICE_SPARSE) {
        m.flags |= BK_ATTN_BLOCK_SPARSE; /* the bitmap: choose_sparse_mask */
    }
    return m;
}

int choose_sparse_mask(const char *pattern, int64_t sparse_block, int64_t seq_len,
                       bk_attn_mask *mask, uint64_t **bits, char *err, size_t err_len)
{
    sparse_pattern p;
    char why[160];
    if (sparse_pattern_parse(pattern, &p, why, sizeof why) != 0) {
        snprintf(err, err_len, "[parallel] sparse_pattern = '%s': %s", pattern, why);
        return -1;
    }
    int64_t n_blocks = seq_len / sparse_block + (seq_len % sparse_block != 0);
    if (n_blocks > CHOICE_SPARSE_MAX_BLOCKS) {
        snprintf(err, err_len,
                 "[parallel] sparse_block = %lld cuts [data] seq_len = %lld into %lld blocks; at "
                 "most %d are supported: use sparse_block >= %lld",
                 (long long)sparse_block, (long long)seq_len, (long long)n_blocks,
                 CHOICE_SPARSE_MAX_BLOCKS,
                 (long long)((seq_len + CHOICE_SPARSE_MAX_BLOCKS - 1) / CHOICE_SPARSE_MAX_BLOCKS));
        return -1;
    }
    if (!bits) return 0;
    if (!(*bits = sparse_pattern_bitmap(&p, n_blocks))) {
        snprintf(err, err_len, "out of memory for the bitmap of [parallel] sparse_pattern");
        return -1;
    }
    *mask = bk_attn_mask_block_sparse(*bits, sparse_block, n_blocks);
    mask->flags |= BK_ATTN_CAUSAL;
    return 0;
}

int choose_recall(train_source_kind source, synthetic_task task)
{
    return source == SOURCE_SYNTHETIC && task == TASK_RECALL;
}

train_keep choose_keep(double attn_kept_fraction)
{
    return attn_kept_fraction >= 0.75  ? KEEP_ALL
           : attn_kept_fraction > 0.25 ? KEEP_HALF
                                       : KEEP_NONE;
}

int keep_half_allowed(seq_layout_kind layout, const bk_attn_mask *mask)
{
    return layout == LAYOUT_ZIGZAG && (mask->flags & BK_ATTN_CAUSAL) &&
           !(mask->flags & ~BK_ATTN_CAUSAL);
}

int choose_memory_candidates(int zero_stage, int lowest_stage, double kept_fraction,
                             int keep_layers, int half_allowed,
                             memory_choice out[MEMORY_CHOICES_MAX])
{
    static const double fractions[] = {1.0, 0.5, 0.0};
    int n = 0;
    for (int f = 0; f < 3; f++) {
        double kept = fractions[f];
        if (kept_fraction == TRAIN_KEPT_AUTO ? kept == 0.5 && !half_allowed : kept != kept_fraction)
            continue;
        for (int layers = 1; layers >= 0; layers--) {
            if (keep_layers != TRAIN_AUTO && layers != keep_layers) continue;
            int first = zero_stage ? zero_stage : lowest_stage, last = zero_stage ? zero_stage : 3;
            for (int stage = first; stage <= last; stage++)
                out[n++] = (memory_choice){stage, kept, layers};
        }
    }
    return n;
}

void memory_choice_apply(const memory_choice *ch, train_config *c)
{
    train_config_set_zero_stage(c, ch->zero_stage);
    c->attn_kept_fraction = ch->kept_fraction;
    c->keep_layers = ch->keep_layers;
}

int choose_topology(train_ring_choice ring, int cp, int nodes, int local_size, ring_topology *topo,
                    int *cp_nodes)
{
    *cp_nodes = local_size > 0 && cp % local_size == 0 ? cp / local_size : 1;
    *topo = TOPO_FLAT;
    if (ring == RING_CHOICE_DOUBLE && *cp_nodes < 2) return -1;
    if (ring == RING_CHOICE_DOUBLE || (ring == RING_CHOICE_AUTO && nodes > 1 && *cp_nodes > 1))
        *topo = TOPO_DOUBLE;
    return 0;
}

int choose_bf16_matmul(train_device device, train_matmul matmul)
{
    return device == TRAIN_DEVICE_CUDA && matmul != MATMUL_FP32;
}

int choose_ring_bf16(int on_device)
{
    return on_device;
}

/* What keeps the rings off SDPA calls, or NULL. */
static const char *sdpa_obstacle(int deterministic, int on_device, int ring_bf16)
{
    if (!on_device) return "on the CPU";
    if (!ring_bf16) return "the inputs travel in fp32";
    if (deterministic)
        return "[attention] deterministic = true (cuDNN's backward sums dQ with atomics)";
    return NULL;
}

/* This machine's device has SDPA calls, of a version without a known bug
 * for the ring's mask. */
static int sdpa_loaded(const ring_sdpa_config *rc, char *why, size_t why_len)
{
    if (!bk_sdpa_available(why, why_len)) return 0; /* else why: which library */
    int window = (rc->need.mask.flags & BK_ATTN_WINDOW) != 0;
    return bk_sdpa_version_usable(bk_sdpa_version(), window, why, why_len);
}

int choose_sdpa(train_attn_kernel kernel, int deterministic, int on_device, int ring_bf16,
                const ring_sdpa_config *rc, int offline, char *why, size_t why_len)
{
    if (kernel == ATTN_KERNEL_BURST) {
        snprintf(why, why_len, "our kernels ([attention] kernel = burst)");
        return 0;
    }
    const char *obstacle = sdpa_obstacle(deterministic, on_device, ring_bf16);
    char reason[256];
    int ok = !obstacle && ring_sdpa_supported(rc, reason, sizeof reason) &&
             (offline || sdpa_loaded(rc, reason, sizeof reason));
    if (ok) {
        snprintf(why, why_len, "cuDNN's fused SDPA (%s)",
                 offline ? "counted as if this machine had it" : reason);
        return 1;
    }
    if (!obstacle) obstacle = reason;
    if (kernel == ATTN_KERNEL_CUDNN) {
        snprintf(why, why_len, "[attention] kernel = cudnn cannot be had: %s", obstacle);
        return -1;
    }
    snprintf(why, why_len, "our kernels: %s", obstacle);
    return 0;
}
