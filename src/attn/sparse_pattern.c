/* sparse_pattern.c: see sparse_pattern.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/attention_math.h"
#include "src/attn/sparse_pattern.h"
#include "util/parse.h"

static const char *const component_names[] = {"local", "global", "strided"};

/* The field of p a component name sets, or NULL for an unknown name. */
static int64_t *component(sparse_pattern *p, const char *name, size_t len)
{
    int64_t *fields[] = {&p->local, &p->global, &p->stride};
    for (int i = 0; i < 3; i++)
        if (strlen(component_names[i]) == len && strncmp(name, component_names[i], len) == 0)
            return fields[i];
    return NULL;
}

int sparse_pattern_parse(const char *text, sparse_pattern *p, char *why, size_t why_len)
{
    memset(p, 0, sizeof *p);
    const char *at = text;
    do {
        const char *end = strchr(at, '+'), *colon = strchr(at, ':');
        size_t len = end ? (size_t)(end - at) : strlen(at);
        if (!colon || colon >= at + len) {
            snprintf(why, why_len,
                     "'%.*s' is not NAME:N (local:W, global:G or strided:S, joined "
                     "by '+')",
                     (int)len, at);
            return -1;
        }
        int64_t *field = component(p, at, (size_t)(colon - at));
        if (!field) {
            snprintf(why, why_len, "unknown component '%.*s' (expected local, global or strided)",
                     (int)(colon - at), at);
            return -1;
        }
        if (*field) {
            snprintf(why, why_len, "'%.*s' is given twice", (int)(colon - at), at);
            return -1;
        }
        char number[32];
        size_t digits = len - (size_t)(colon - at) - 1;
        snprintf(number, sizeof number, "%.*s", (int)(digits < 31 ? digits : 31), colon + 1);
        if (digits >= 31 || bu_parse_i64_min(number, 1, field) != 0) {
            snprintf(why, why_len, "'%.*s': the number of blocks must be an integer >= 1", (int)len,
                     at);
            return -1;
        }
        at = end ? end + 1 : NULL;
    } while (at);
    return 0;
}

int sparse_pattern_allows(const sparse_pattern *p, int64_t q, int64_t k)
{
    if (k > q) return 0;
    return (p->local && q - k < p->local) || (p->global && k < p->global) ||
           (p->stride && (q - k) % p->stride == 0);
}

uint64_t *sparse_pattern_bitmap(const sparse_pattern *p, int64_t n_blocks)
{
    uint64_t *bits = calloc((size_t)bk_attn_block_words(n_blocks), sizeof(uint64_t));
    if (!bits) return NULL;
    for (int64_t q = 0; q < n_blocks; q++)
        for (int64_t k = 0; k <= q; k++)
            if (sparse_pattern_allows(p, q, k)) {
                int64_t bit = q * n_blocks + k;
                bits[bit >> 6] |= 1ull << (bit & 63);
            }
    return bits;
}
