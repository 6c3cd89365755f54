/* test_sparse_pattern.c: block-sparse patterns written as text: what each
 * component means, read back through the kernels' own bit lookup
 * (bk_attn_block_bit) against the definitions written out here, bits above
 * the diagonal never set, and every malformed pattern refused with a reason
 * naming the part at fault. */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/attention.h"
#include "src/attn/sparse_pattern.h"
#include "tests/lib/check_main.h"

/* The definition of sparse_pattern.h, component by component. */
static int wanted(int64_t local, int64_t global, int64_t stride, int64_t q, int64_t k)
{
    if (k > q) return 0;
    int64_t back = q - k; /* blocks back from the query's */
    int in_local = local > 0 && back < local;
    int in_global = global > 0 && k < global;
    int in_stride = stride > 0 && back % stride == 0;
    return in_local || in_global || in_stride;
}

START_TEST(patterns_set_the_blocks_they_name)
{
    static const struct {
        const char *text;
        int64_t local, global, stride;
    } cases[] = {
        {"local:1", 1, 0, 0},          {"local:3", 3, 0, 0},
        {"global:2", 0, 2, 0},         {"strided:3", 0, 0, 3},
        {"local:4+global:1", 4, 1, 0}, {"strided:4+global:2+local:2", 2, 2, 4},
    };
    static const int64_t sizes[] = {1, 7, 9, 13}; /* bitmaps of 1, 49, 81, 169 bits */
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        sparse_pattern p;
        char why[160] = "";
        ck_assert_msg(sparse_pattern_parse(cases[c].text, &p, why, sizeof why) == 0, "%s: %s",
                      cases[c].text, why);
        ck_assert_int_eq(p.local, cases[c].local);
        ck_assert_int_eq(p.global, cases[c].global);
        ck_assert_int_eq(p.stride, cases[c].stride);
        for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
            int64_t nb = sizes[s], bs = 5;
            uint64_t *bits = sparse_pattern_bitmap(&p, nb);
            bk_attn_mask m = bk_attn_mask_block_sparse(bits, bs, nb);
            for (int64_t q = 0; q < nb; q++)
                for (int64_t k = 0; k < nb; k++) {
                    int want = wanted(p.local, p.global, p.stride, q, k);
                    ck_assert_msg(bk_attn_block_bit(&m, q * bs + 2, k * bs + 4) == want,
                                  "%s, %lld blocks: bit (%lld, %lld) is not %d", cases[c].text,
                                  (long long)nb, (long long)q, (long long)k, want);
                    ck_assert_int_eq(sparse_pattern_allows(&p, q, k), want);
                }
            free(bits);
        }
    }
}
END_TEST

START_TEST(malformed_patterns_are_refused_with_the_reason)
{
    static const struct {
        const char *text, *why;
    } cases[] = {
        {"", "'' is not NAME:N"},
        {"local", "'local' is not NAME:N"},
        {"local:", "'local:': the number of blocks must be an integer >= 1"},
        {"local:0", "'local:0': the number of blocks must be an integer >= 1"},
        {"local:-2", "'local:-2': the number of blocks"},
        {"local:2x", "'local:2x': the number of blocks"},
        {"local:99999999999999999999", "the number of blocks"},
        {"band:2", "unknown component 'band'"},
        {"local:2+", "'' is not NAME:N"},
        {"+local:2", "'' is not NAME:N"},
        {"local:2+global:1+local:3", "'local' is given twice"},
        {"local:2 + global:1", "the number of blocks"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        sparse_pattern p;
        char why[160] = "";
        ck_assert_msg(sparse_pattern_parse(cases[c].text, &p, why, sizeof why) == -1, "'%s' read",
                      cases[c].text);
        ck_assert_msg(strstr(why, cases[c].why) != NULL, "'%s': got '%s'", cases[c].text, why);
    }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("sparse_pattern");
    TCase *tc = check_tcase(s, "sparse_pattern", 0);
    check_add_tests(tc, patterns_set_the_blocks_they_name,
                    malformed_patterns_are_refused_with_the_reason);
    return check_run(s);
}
