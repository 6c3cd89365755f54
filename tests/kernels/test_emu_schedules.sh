#!/bin/sh
# test_emu_schedules.sh: the device kernel tests again in the SIMT emulator
# under its other schedules (BK_EMU_SCHEDULE): the threads of each block
# resumed in reverse order, and random schedules of fixed seeds (threads in a
# random order, preempted at shared-memory accesses and warp collectives,
# blocks in a random order). A kernel that relies on an order the hardware does
# not promise (a missing __syncthreads or __syncwarp, one block reading what
# another wrote) computes differently under one of them, so that run fails.
# The random runs also cap every grid-stride launch at 2 blocks
# (BK_EMU_GRID_CAP), so that the loops wrap at the tests' small sizes as they
# do at a 1M-token sequence's on a GPU, and queue kernels on their streams
# (BK_EMU_STREAMS=deferred) with random run points. The streams test and the
# device model runner's tests run once more with kernels deferred: work
# ordered only by launching it early reads old data there.
# The seeds are fixed so that a run is the same every time; more seeds:
#   BURST_EMU_SEEDS="$(seq 1 100)" sh tests/kernels/test_emu_schedules.sh
# In the sanitizer build, whose ASan makes each run of the attention kernels'
# suite take minutes, the schedules run the elementwise and GEMM kernels'
# suite alone: an order bug is the schedules' to find, not the sanitizers',
# and the CUDA build runs both suites under every schedule. The streams and
# model runs with kernels deferred run in both builds.
build="${BURST_TEST_BUILDDIR:-.}"
top="$build/tests"
seeds="${BURST_EMU_SEEDS:-1}"
scheduled="kernels/test_dev_ops_emu kernels/test_dev_attention_emu"
grep -q '^#define BURST_SANITIZERS 1' "$build/config.h" 2>/dev/null &&
    scheduled="kernels/test_dev_ops_emu"
status=0
run() { # run TEST SCHEDULE GRID_CAP STREAMS
    echo "== $1, schedule $2, grid cap ${3:-none}, streams $4"
    [ -x "$top/$1" ] || { echo "FAIL: missing $top/$1"; exit 1; }
    BK_EMU_SCHEDULE=$2 BK_EMU_GRID_CAP=$3 BK_EMU_STREAMS=$4 "$top/$1" ||
        { echo "FAIL: $1 under BK_EMU_SCHEDULE=$2 BK_EMU_GRID_CAP=$3 BK_EMU_STREAMS=$4"; status=1; }
}
for t in $scheduled; do
    run "$t" reverse "" eager
    for s in $seeds; do run "$t" "random:$s" 2 deferred; done
done
for t in kernels/test_dev_streams_emu train/test_model_device train/test_lm_head_device; do
    run "$t" forward "" deferred
done
exit $status
