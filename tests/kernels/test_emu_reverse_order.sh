#!/bin/sh
# test_emu_reverse_order.sh: the device kernel tests again in the SIMT
# emulator, with the threads of each block resumed in reverse order
# (BK_EMU_ORDER=reverse). A kernel that relies on an order the hardware does
# not promise (a missing __syncthreads or __syncwarp) computes differently in
# one of the two orders, so one of the two runs fails.
dir="${BURST_TEST_BUILDDIR:-.}/tests/kernels"
status=0
for t in test_dev_ops_emu test_dev_attention_emu; do
    [ -x "$dir/$t" ] || { echo "FAIL: missing $dir/$t"; exit 1; }
    echo "== $t, threads in reverse order"
    BK_EMU_ORDER=reverse "$dir/$t" || status=1
done
exit $status
