#!/bin/sh
# test_simt_wrong_layout.sh: the emulator's mma and ldmatrix tests, and the
# attention kernels' sweep over every mask, run against an emulator built with
# layout mutants (-DBK_EMU_MMA_MUTANTS), one classic mistake per fragment table
# of the PTX ISA, chosen by BK_EMU_MMA_MUTANT (emu/simt/simt_mma.cc):
#   1 A registers 1 and 2 swapped      2 B halves k, k + 8 instead of k, k + 1
#   3 C registers 1 and 2 swapped      4 ldmatrix: lane l holds row l % 8
#                                        (the address lanes' order)
#   5 ldmatrix.trans loads untransposed
# Each must fail the emulator's own test of that table (the mma against a
# scalar product, or ldmatrix against the ISA's table) and the attention
# kernels' comparison with the reference: the tests can fail when fragments
# are laid out wrongly. Without a mutant both pass (the negative control).
# In the sanitizer build, whose ASan makes the attention sweep slow, the sweep
# runs against mutant 1 alone; every mutant still fails the emulator's own
# tests there, and the CUDA build runs the whole set.
build="${BURST_TEST_BUILDDIR:-.}"
dir="$build/tests/kernels"
prog="$dir/test_simt_wrong_layout"
attn="$dir/test_dev_attention_wrong_layout"
for p in "$prog" "$attn"; do [ -x "$p" ] || { echo "missing $p"; exit 1; }; done
sweep_mutants="1 2 3 4 5"
grep -q '^#define BURST_SANITIZERS 1' "$build/config.h" 2>/dev/null && sweep_mutants=1

fail() { echo "FAIL: $*"; exit 1; }

# expect_failure MUTANT CASE PATTERN: CASE of test_simt fails, saying PATTERN
expect_failure() {
    out=$(BK_EMU_MMA_MUTANT=$1 CK_RUN_CASE=$2 CK_VERBOSITY=normal "$prog" 2>&1) &&
        fail "mutant $1: the $2 tests passed"
    echo "$out" | grep -q "$3" || { echo "$out"; fail "mutant $1: $2 did not fail on '$3'"; }
}

# the attention sweep fails against its reference under mutant $1 (where the
# build runs the sweep for it)
expect_attention_failure() {
    attn_said="the attention kernels"
    case " $sweep_mutants " in *" $1 "*) ;; *)
        attn_said="(the attention sweep: in the CUDA build)"
        return 0 ;;
    esac
    out=$(BK_EMU_MMA_MUTANT=$1 CK_RUN_CASE=sweep CK_VERBOSITY=normal "$attn" 2>&1) &&
        fail "mutant $1: the attention kernels passed"
    echo "$out" | grep -q "sweep: mask .* error/tolerance O" ||
        { echo "$out" | tail -5; fail "mutant $1: the attention sweep failed, not on a comparison"; }
}

mma_mismatch='mma.*D\[[0-9]*\]\[[0-9]*\] = .*scalar product'
for m in 1 2 3; do
    expect_failure $m mma "$mma_mismatch"
    BK_EMU_MMA_MUTANT=$m CK_RUN_CASE=primitives "$prog" >/dev/null 2>&1 ||
        fail "mutant $m: the tests without mma failed too"
    expect_attention_failure $m
    echo "ok: mutant $m fails the mma tests (and only them) and $attn_said"
done
for m in 4 5; do
    expect_failure $m primitives 'ldmatrix_fragments'
    expect_failure $m mma "$mma_mismatch"
    expect_attention_failure $m
    echo "ok: mutant $m fails the ldmatrix test, the mma test through ldmatrix and $attn_said"
done
CK_RUN_CASE=mma "$prog" >/dev/null 2>&1 || fail "the mma tests fail with no mutant planted"
CK_RUN_CASE=sweep "$attn" >/dev/null 2>&1 || fail "the attention sweep fails with no mutant planted"
echo "ok: with no mutant planted, the same programs pass"
