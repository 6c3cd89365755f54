#!/bin/sh
# test_check_summary.sh: the summary of tests/run.sh (tests/lib/check_summary.sh)
# counts a skipped test as skipped, not passed, and names it; a skipped
# real-Slurm test fails the run under CI=true, a skipped GPU test does not; a
# failed test fails it. The results are made up in a scratch build directory.
set -u
src=${BURST_TEST_SRCDIR:-$(cd "$(dirname "$0")/../.." && pwd)}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/tests/io" "$work/tests/transport" "$work/tests/kernels"
printf 'list-test-results:\n\t@echo %s\n' \
    "tests/io/test_corpus.trs tests/transport/test_slurm.trs tests/kernels/test_dev_gemm_cuda.trs" \
    >"$work/Makefile"
# results CORPUS SLURM CUDA: the three tests' outcomes (PASS, SKIP, FAIL).
results() {
    for t in io/test_corpus:$1 transport/test_slurm:$2 kernels/test_dev_gemm_cuda:$3; do
        echo ":test-result: ${t#*:}" >"$work/tests/${t%:*}.trs"
        echo "${t%:*}" >"$work/tests/${t%:*}.log"
    done
}
failures=0
# expect CODE TEXT CI: the summary exits CODE and prints TEXT, with CI=CI.
expect() {
    out=$(CI=$3 sh "$src/tests/lib/check_summary.sh" "$work" 2>&1)
    code=$?
    if [ $code -eq "$1" ] && printf '%s\n' "$out" | grep -qF -- "$2"; then
        echo "PASS: CI='$3': $2"
    else
        echo "FAIL: CI='$3': expected exit $1 and '$2', got exit $code:"
        printf '%s\n' "$out" | sed 's/^/    /'
        failures=$((failures + 1))
    fi
}
results PASS PASS SKIP
expect 0 "2 passed, 0 failed, 1 skipped (skipped: kernels/test_dev_gemm_cuda)" ""
expect 0 "2 passed, 0 failed, 1 skipped (skipped: kernels/test_dev_gemm_cuda)" true
results PASS SKIP SKIP
expect 0 "1 passed, 0 failed, 2 skipped (skipped: transport/test_slurm kernels/test_dev_gemm_cuda)" ""
expect 1 "FAILED: tests/transport/test_slurm was skipped, and CI must run it" true
results FAIL PASS PASS
expect 1 "FAILED: tests/io/test_corpus (see" ""
expect 1 "2 passed, 1 failed, 0 skipped" ""
echo "$((6 - failures)) passed, $failures failed"
[ $failures -eq 0 ]
