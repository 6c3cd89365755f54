/* attn_options.c: see attn_options.h. */
#include <stdlib.h>
#include <string.h>

#include "src/attn/attn_options.h"
#include "util/alloc.h"
#include "util/parse.h"

void attn_options_default(attn_options *o)
{
    memset(o, 0, sizeof *o);
    o->seq = 16384;
    o->ranks = 2;
    o->nodes = 1;
    o->h_q = 8;
    o->h_kv = 8;
    o->d = 64;
    snprintf(o->mask, sizeof o->mask, "causal");
    o->window = 4096;
    o->doc_len = 4096;
    o->sparse_block = 512;
    o->sparse_density = 0.25;
    o->bwd = BWD_AUTO;
}

int attn_parse_head_dim(const char *v, int *d)
{
    int64_t x;
    if (bu_parse_i64(v, &x, NULL) != 0 || x < 8 || x > 1024 || x % 8 != 0) return -1;
    *d = (int)x;
    return 0;
}

/* max / mean over ranks of the (query, key) pairs each rank's queries meet:
 * the work imbalance of a layout under a mask (1 = perfectly balanced). */
static double imbalance(const seq_layout *l, const attn_need_ctx *need)
{
    double max = 0, sum = 0;
    seq_chunk all = {0, l->N};
    for (int r = 0; r < l->P; r++) {
        seq_chunk c[2];
        int n = seq_layout_chunks(l, r, c);
        double pairs = (double)attn_need_pairs(need, c, n, &all, 1, 1);
        sum += pairs;
        if (pairs > max) max = pairs;
    }
    return sum > 0 ? max / (sum / l->P) : 1.0;
}

int attn_options_build(attn_options *o, ring_plan_config *cfg, char *err, size_t err_len)
{
    memset(cfg, 0, sizeof *cfg);
    int64_t N = o->seq;
    free(o->segments);
    free(o->sparse_bits);
    o->segments = NULL;
    o->sparse_bits = NULL;
    if (strcmp(o->mask, "none") == 0) {
        o->kernel_mask = bk_attn_mask_none();
    } else if (strcmp(o->mask, "causal") == 0) {
        o->kernel_mask = bk_attn_mask_causal();
    } else if (strcmp(o->mask, "window") == 0) {
        o->kernel_mask = bk_attn_mask_window(o->window - 1, 0);
        o->kernel_mask.flags |= BK_ATTN_CAUSAL;
    } else if (strcmp(o->mask, "document") == 0) {
        o->kernel_mask = bk_attn_mask_document(1);
        o->segments = bu_calloc((size_t)N * sizeof(int32_t), "the document ids of the sequence",
                                err, err_len);
        if (!o->segments) return -1;
        for (int64_t p = 0; p < N; p++) o->segments[p] = (int32_t)(p / o->doc_len);
    } else { /* sparse: causal blocks, the diagonal and a seeded fraction of the rest */
        int64_t bs = o->sparse_block, nb = (N + bs - 1) / bs;
        if (nb > 65536) {
            snprintf(err, err_len, "--sparse-block %lld gives %lld blocks: at most 65536",
                     (long long)bs, (long long)nb);
            return -1;
        }
        o->sparse_bits =
            bu_calloc(bk_attn_block_bytes(nb), "the block-sparse bitmap", err, err_len);
        if (!o->sparse_bits) return -1;
        uint64_t rng = 42;
        for (int64_t q = 0; q < nb; q++)
            for (int64_t k = 0; k <= q; k++) {
                rng = rng * 6364136223846793005ull + 1442695040888963407ull;
                if (k == q || (double)(rng >> 11) / 9007199254740992.0 < o->sparse_density)
                    o->sparse_bits[(q * nb + k) / 64] |= 1ull << ((q * nb + k) % 64);
            }
        o->kernel_mask = bk_attn_mask_block_sparse(o->sparse_bits, bs, nb);
        o->kernel_mask.flags |= BK_ATTN_CAUSAL;
    }
    cfg->need = (attn_need_ctx){.mask = o->kernel_mask, .segments = o->segments, .N = N};
    cfg->h_q = o->h_q;
    cfg->h_kv = o->h_kv;
    cfg->d = o->d;
    cfg->topo = o->nodes > 1 && !o->flat ? TOPO_DOUBLE : TOPO_FLAT;
    cfg->nodes = o->nodes;
    if (o->nodes < 1 || o->ranks % o->nodes != 0) {
        snprintf(err, err_len, "--ranks %d cannot be split evenly over --nodes %d", o->ranks,
                 o->nodes);
        return -1;
    }
    if (!o->layout_given) {
        /* zigzag balances causal work; otherwise take the better-balanced layout */
        o->layout = strcmp(o->mask, "causal") == 0 ? LAYOUT_ZIGZAG : LAYOUT_CONTIGUOUS;
        seq_layout c, z;
        char ignore[64];
        if (strcmp(o->mask, "sparse") == 0 && o->seq <= (1 << 18) &&
            seq_layout_init(&c, LAYOUT_CONTIGUOUS, o->ranks, N, ignore, sizeof ignore) == 0 &&
            seq_layout_init(&z, LAYOUT_ZIGZAG, o->ranks, N, ignore, sizeof ignore) == 0 &&
            imbalance(&z, &cfg->need) < imbalance(&c, &cfg->need))
            o->layout = LAYOUT_ZIGZAG;
    }
    return seq_layout_init(&cfg->layout, o->layout, o->ranks, N, err, err_len);
}

double attn_options_imbalance(const ring_plan_config *cfg)
{
    return imbalance(&cfg->layout, &cfg->need);
}

void attn_options_free(attn_options *o)
{
    free(o->segments);
    free(o->sparse_bits);
    o->segments = NULL;
    o->sparse_bits = NULL;
}
