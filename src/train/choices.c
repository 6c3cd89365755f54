/* choices.c: see choices.h. The names compared here are the ones config.c accepts
 * (its table lists them), so an unknown name cannot reach these functions. */
#include <stdio.h>
#include <string.h>

#include "src/attn/sparse_pattern.h"
#include "src/train/choices.h"

seq_layout_kind choose_layout(const char *layout, const char *mask)
{
    if (strcmp(layout, "zigzag") == 0) return LAYOUT_ZIGZAG;
    if (strcmp(layout, "contiguous") == 0) return LAYOUT_CONTIGUOUS;
    return strcmp(mask, "causal") == 0 ? LAYOUT_ZIGZAG : LAYOUT_CONTIGUOUS;
}

bk_attn_mask choose_mask(const char *mask, int64_t window)
{
    if (strcmp(mask, "document") == 0) return bk_attn_mask_document(1);
    bk_attn_mask m = bk_attn_mask_causal();
    if (strcmp(mask, "window") == 0) {
        m = bk_attn_mask_window(window - 1, 0);
        m.flags |= BK_ATTN_CAUSAL;
    } else if (strcmp(mask, "sparse") == 0) {
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

ring_bwd_choice choose_backward(const char *backward)
{
    return strcmp(backward, "q") == 0    ? BWD_Q_SIDE
           : strcmp(backward, "kv") == 0 ? BWD_KV_SIDE
                                         : BWD_AUTO;
}

train_ring_choice choose_ring(const char *ring)
{
    return strcmp(ring, "flat") == 0     ? RING_CHOICE_FLAT
           : strcmp(ring, "double") == 0 ? RING_CHOICE_DOUBLE
                                         : RING_CHOICE_AUTO;
}

train_source_kind choose_source(const char *source)
{
    return strcmp(source, "hdf5") == 0 ? SOURCE_HDF5 : SOURCE_SYNTHETIC;
}

int choose_recall(const char *source, const char *task)
{
    return choose_source(source) == SOURCE_SYNTHETIC && strcmp(task, "recall") == 0;
}

int choose_shuffled(const char *sampling)
{
    return strcmp(sampling, "shuffled") == 0;
}

train_nonfinite choose_on_nonfinite(const char *on_nonfinite)
{
    return strcmp(on_nonfinite, "skip") == 0 ? NONFINITE_SKIP : NONFINITE_STOP;
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

int choose_device(const char *device)
{
    return strcmp(device, "cuda") == 0;
}

int choose_bf16_matmul(const char *device, const char *matmul)
{
    return choose_device(device) && strcmp(matmul, "fp32") != 0;
}

int choose_ring_bf16(int on_device)
{
    return on_device;
}
