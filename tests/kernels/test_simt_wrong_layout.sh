#!/bin/sh
# test_simt_wrong_layout.sh: the emulator's mma tests, run against an mma built
# with a deliberately wrong A-fragment layout (-DBK_EMU_MMA_WRONG_LAYOUT: a1 and
# a2 swapped), must fail, and fail in the mma comparison, while the tests that
# do not involve the mma still pass; and the attention kernels' sweep over every
# mask, linked with that mma, must fail against the reference. Shows that the
# tests can fail when the fragments are laid out wrongly.
dir="${BURST_TEST_BUILDDIR:-.}/tests/kernels"
prog="$dir/test_simt_wrong_layout"
attn="$dir/test_dev_attention_wrong_layout"
for p in "$prog" "$attn"; do [ -x "$p" ] || { echo "missing $p"; exit 1; }; done

out=$(CK_RUN_CASE=mma CK_VERBOSITY=normal "$prog" 2>&1)
status=$?
echo "$out"
if [ "$status" -eq 0 ]; then
    echo "FAIL: the mma tests passed with a wrong fragment layout"
    exit 1
fi
for t in mma_matches_scalar_product mma_with_ldmatrix_matches_scalar_product; do
    if ! echo "$out" | grep -q "$t:.*mma.*D\[[0-9]*\]\[[0-9]*\] = .*scalar product"; then
        echo "FAIL: $t did not fail on the mma comparison"
        exit 1
    fi
done

out=$(CK_RUN_CASE=primitives CK_VERBOSITY=normal "$prog" 2>&1) || {
    echo "$out"
    echo "FAIL: tests without mma failed too"
    exit 1
}
echo "ok: a wrong mma fragment layout fails the mma tests (and only them)"

out=$(CK_RUN_CASE=sweep CK_VERBOSITY=normal "$attn" 2>&1)
status=$?
echo "$out" | grep -E '^[0-9]+%|:F:' | head -4
if [ "$status" -eq 0 ] || ! echo "$out" | grep -q "sweep: mask .* error/tolerance O"; then
    echo "FAIL: the attention kernels passed with a wrong mma fragment layout"
    exit 1
fi
echo "ok: with the wrong layout the attention kernels fail their reference comparison"
