#!/bin/sh
# test_device_waits.sh: the host waits of a training step on the emulated
# device's ring, counted by the emulator's account (BK_EMU_COUNT=1,
# emu/simt/simt_account.h): rank 0's first step waits as often with 2 layers
# as with 1, and on a ring of 4 ranks as on one of 2, so that no wait inside a
# step grows with the layers or the ring's steps (test_device_account holds
# the same on one rank, and the head's chunks; doc/BENCHMARKS.md, "The device
# step's account on the emulator").
build="${BURST_TEST_BUILDDIR:-.}"
burst="$build/burst"
emu="$build/tests/train/burst_emu"
for p in "$burst" "$emu"; do
    [ -x "$p" ] || { echo "FAIL: missing $p"; exit 1; }
done
# waits RANKS LAYERS: rank 0's host waits in step 1 of the tiny model at 64 tokens
waits() {
    BK_EMU_COUNT=1 OMP_NUM_THREADS=1 "$burst" run -n "$1" -- "$emu" train \
        --set train.device=cuda --set attention.kernel=burst --set data.seq_len=64 \
        --set parallel.cp="$1" --set model.layers="$2" --set train.steps=1 \
        --set train.warmup_steps=0 2>&1 |
        sed -n 's/^\[0\] emu account step=1 .* waits=\([0-9]*\) .*/\1/p'
}
status=0
two_one=$(waits 2 1)
two_two=$(waits 2 2)
four_two=$(waits 4 2)
echo "host waits of rank 0's step: cp 2, 1 layer: ${two_one:-none}; cp 2, 2 layers: ${two_two:-none}; cp 4, 2 layers: ${four_two:-none}"
for w in "$two_one" "$two_two" "$four_two"; do
    [ -n "$w" ] || { echo "FAIL: a run printed no account"; exit 1; }
done
[ "$two_two" -eq "$two_one" ] ||
    { echo "FAIL: a second layer adds $((two_two - two_one)) host waits"; status=1; }
[ "$four_two" -eq "$two_two" ] ||
    { echo "FAIL: the ring of 4 ranks waits $((four_two - two_two)) times more than that of 2"; status=1; }
[ $status -eq 0 ] && echo "PASS: host waits independent of the layers and the ring's steps"
exit $status
