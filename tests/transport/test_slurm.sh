#!/bin/sh
# test_slurm.sh: launches burst through a real Slurm that the test starts on
# this machine (tests/lib/slurm/start.sh): the transport self-test under
# `srun --mpi=pmix` and under plain `srun` (Slurm's environment + TCP
# rendezvous), a rank killed under srun named by the survivors, training
# from an HDF5 corpus, and the OpenMP threads of a task (SLURM_CPUS_PER_TASK).
# Skips (exit 77) where Slurm cannot be started (not root, not installed).
set -u
src=${BURST_TEST_SRCDIR:-$(cd "$(dirname "$0")/../.." && pwd)}
build=${BURST_TEST_BUILDDIR:-.}
burst=${BURST:-$build/burst}
dir=$build/tests/slurm-state
mkdir -p "$dir"
envf=$(sh "$src/tests/lib/slurm/start.sh" "$dir")
rc=$?
[ $rc -eq 77 ] && exit 77
[ $rc -ne 0 ] && { echo "FAIL: could not start Slurm"; exit 1; }
trap 'sh "$src/tests/lib/slurm/stop.sh" "$dir" >/dev/null 2>&1' EXIT
. "$envf"
# Plain srun derives the job secret from a per-user file: keep the test's own.
export BURST_SECRET_FILE="$dir/secret"
export BURST_TIMEOUT=20

failures=0
check() { # name, expected text, command...
    name=$1 want=$2
    shift 2
    out=$("$@" 2>&1)
    code=$?
    if printf '%s\n' "$out" | grep -q -- "$want"; then
        echo "PASS: $name"
    else
        echo "FAIL: $name (exit $code; expected '$want'):"
        printf '%s\n' "$out" | sed 's/^/    /'
        failures=$((failures + 1))
    fi
}

check "srun --mpi=pmix selftest" "selftest: passed on all ranks" \
    timeout 120 srun -n 4 --kill-on-bad-exit=1 --mpi=pmix "$burst" selftest
check "srun --mpi=pmix uses PMIx" "bootstrap: pmix" \
    timeout 120 srun -n 2 --kill-on-bad-exit=1 --mpi=pmix "$burst" selftest
check "plain srun selftest" "selftest: passed on all ranks" \
    timeout 120 srun -n 4 --kill-on-bad-exit=1 "$burst" selftest
check "plain srun uses Slurm's environment" "bootstrap: slurm" \
    timeout 120 srun -n 2 --kill-on-bad-exit=1 "$burst" selftest
[ "$(stat -c %a "$BURST_SECRET_FILE" 2>/dev/null)" = 600 ] && echo "PASS: secret file is mode 600" ||
    { echo "FAIL: secret file $BURST_SECRET_FILE is not mode 600"; failures=$((failures + 1)); }
# A rank killed under srun (without --kill-on-bad-exit, so the survivors must
# find out by themselves): every survivor names it.
# (a survivor may still be in the barrier before the receive when it hears)
check "srun: killed rank named by survivors" "rank 1: .*lost rank 2 (" \
    timeout 120 srun -n 3 --mpi=pmix "$build/tests/transport/transport_worker" kill

# A task runs as many OpenMP threads as srun -c gives it (src/cli/placement.c).
check "srun -c 1: one OpenMP thread" "openmp: 1 thread on CPUs" \
    env -u OMP_NUM_THREADS timeout 60 srun -n 1 -c 1 "$burst" version --verbose
check "srun -c 2: two OpenMP threads" "openmp: 2 threads on CPUs" \
    env -u OMP_NUM_THREADS timeout 60 srun -n 1 -c 2 "$burst" version --verbose

# Training from an HDF5 corpus, ranks launched by srun.
corpus="$dir/corpus.h5"
"$burst" data synth --task copy --seq-len 256 --samples 8 -o "$corpus" >/dev/null
check "srun: training from an HDF5 corpus" "done: step 3 of 3" \
    timeout 300 srun -n 2 --kill-on-bad-exit=1 --mpi=pmix "$burst" train --set parallel.cp=2 \
    --set data.source=hdf5 --set "data.path=$corpus" --set data.seq_len=256 \
    --set train.steps=3 --set train.warmup_steps=1

echo "$((9 - failures)) passed, $failures failed"
[ $failures -eq 0 ]
