#!/bin/sh
# test_simt_wrong_layout.sh: the emulator's mma tests, run against an mma built
# with a deliberately wrong A-fragment layout (-DBK_EMU_MMA_WRONG_LAYOUT: a1 and
# a2 swapped), must fail, and fail in the mma comparison, while the tests that
# do not involve the mma still pass. Shows that the mma test can fail.
prog="${BURST_TEST_BUILDDIR:-.}/tests/kernels/test_simt_wrong_layout"
[ -x "$prog" ] || { echo "missing $prog"; exit 1; }

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
