/* plan.c: see plan.h. The names compared here are the ones config.c accepts
 * (its table lists them), so an unknown name cannot reach these functions. */
#include <string.h>

#include "src/train/plan.h"

seq_layout_kind plan_layout(const char *layout, const char *mask)
{
    if (strcmp(layout, "zigzag") == 0) return LAYOUT_ZIGZAG;
    if (strcmp(layout, "contiguous") == 0) return LAYOUT_CONTIGUOUS;
    return strcmp(mask, "causal") == 0 ? LAYOUT_ZIGZAG : LAYOUT_CONTIGUOUS;
}

bk_attn_mask plan_mask(const char *mask, int64_t window)
{
    if (strcmp(mask, "window") != 0) return bk_attn_mask_causal();
    bk_attn_mask m = bk_attn_mask_window(window - 1, 0);
    m.flags |= BK_ATTN_CAUSAL;
    return m;
}

ring_bwd_choice plan_backward(const char *backward)
{
    return strcmp(backward, "q") == 0 ? BWD_Q_SIDE : strcmp(backward, "kv") == 0 ? BWD_KV_SIDE : BWD_AUTO;
}

train_ring_choice plan_ring(const char *ring)
{
    return strcmp(ring, "flat") == 0     ? RING_CHOICE_FLAT
           : strcmp(ring, "double") == 0 ? RING_CHOICE_DOUBLE
                                         : RING_CHOICE_AUTO;
}

train_source_kind plan_source(const char *source)
{
    return strcmp(source, "hdf5") == 0 ? SOURCE_HDF5 : SOURCE_SYNTHETIC;
}

int plan_recall(const char *source, const char *task)
{
    return plan_source(source) == SOURCE_SYNTHETIC && strcmp(task, "recall") == 0;
}

int plan_shuffled(const char *sampling)
{
    return strcmp(sampling, "shuffled") == 0;
}

train_nonfinite plan_on_nonfinite(const char *on_nonfinite)
{
    return strcmp(on_nonfinite, "skip") == 0 ? NONFINITE_SKIP : NONFINITE_STOP;
}

train_keep plan_keep(double ckpt_fraction)
{
    return ckpt_fraction >= 0.75 ? KEEP_ALL : ckpt_fraction > 0.25 ? KEEP_HALF : KEEP_NONE;
}

int plan_keep_half_allowed(seq_layout_kind layout, const bk_attn_mask *mask)
{
    return layout == LAYOUT_ZIGZAG && (mask->flags & BK_ATTN_CAUSAL) &&
           !(mask->flags & ~BK_ATTN_CAUSAL);
}

int plan_topology(train_ring_choice ring, int cp, int nodes, int local_size, ring_topology *topo,
                  int *cp_nodes)
{
    *cp_nodes = local_size > 0 && cp % local_size == 0 ? cp / local_size : 1;
    *topo = TOPO_FLAT;
    if (ring == RING_CHOICE_DOUBLE && *cp_nodes < 2) return -1;
    if (ring == RING_CHOICE_DOUBLE || (ring == RING_CHOICE_AUTO && nodes > 1 && *cp_nodes > 1))
        *topo = TOPO_DOUBLE;
    return 0;
}
