#!/bin/sh
# soak_failures.sh [RUNS] [BUILD_DIR]: runs each way of losing a rank RUNS
# times (default 25) and counts the runs in which every survivor named the lost
# rank within 10 s of its death, exiting by itself (launched with --no-kill).
# Not part of `make check` (it takes minutes); run it after touching the
# transport, the control plane or the launcher, and record the counts in
# doc/TRANSPORT.md. The ways:
#   ring        rank 1 of 3 killed during the attention ring (forward or backward)
#   collective  the last of 4 ranks on 2 emulated nodes killed after a barrier,
#               the others in a receive from it
#   large       rank 1 of 2 killed while rank 0 reads 512 MiB from it (cma)
#   alltoall    the last of 4 ranks on 2 emulated nodes killed just before an
#               all-to-all of 1 MiB blocks, the others in it
#   checkpoint  rank 2 of 4 (2 emulated nodes) killed 0-0.5 s after the first
#               checkpoint of a training run that writes one every step
#   srun        rank 2 of 3 killed after a barrier, under srun --mpi=pmix of a
#               Slurm started here (tests/lib/slurm/start.sh: root and slurm-wlm)
# Exits 1 when any run failed.
runs=${1:-25}
src=$(cd "$(dirname "$0")/../.." && pwd)
build=${2:-$src/_build}
burst=$build/burst
worker=$build/tests/transport/transport_worker
ring=$build/tests/attn/ring_worker
for p in "$burst" "$worker" "$ring"; do
    [ -x "$p" ] || { echo "soak_failures.sh: $p not built (make check builds it)" >&2; exit 2; }
done
tmp=$(mktemp -d)
chmod 755 "$tmp" # munged wants its socket's folders open to all
trap 'rm -rf "$tmp"' EXIT
failed=0

# survivors_named OUT VICTIM RANK...: every listed rank printed "rank K: ... lost
# rank VICTIM (" (under burst run its lines start with "[K] ").
survivors_named() {
    out=$1 victim=$2
    shift 2
    for k in "$@"; do
        grep -Eq "^(\[$k\] )?(.*: )?rank $k: .*lost rank $victim \(" "$out" || return 1
    done
}

# soak NAME VICTIM "SURVIVORS" COMMAND...: RUNS runs of COMMAND (a command
# under `timeout`, or a function of this script), each passing when the
# survivors named the victim and the time from the victim's death to the last
# survivor's exit was under 10 s: the whole run, or what the command printed
# as "soak: S s from the kill to the end".
soak() {
    name=$1 victim=$2 survivors=$3
    shift 3
    ok=0 slowest=0
    for i in $(seq "$runs"); do
        t0=$(date +%s.%N)
        "$@" >"$tmp/out" 2>&1
        t=$(echo "$(date +%s.%N) - $t0" | bc)
        # a way that knows when its victim died says how long the rest took
        since_kill=$(sed -n 's/^soak: \([0-9.]*\) s from the kill to the end$/\1/p' "$tmp/out")
        [ -n "$since_kill" ] && t=$since_kill
        # shellcheck disable=SC2086
        if survivors_named "$tmp/out" "$victim" $survivors && [ "$(echo "$t < 10" | bc)" = 1 ]; then
            ok=$((ok + 1))
        else
            cp "$tmp/out" "$tmp/../soak-$name-$i.log" 2>/dev/null
            echo "  $name run $i failed after $t s (output in $(dirname "$tmp")/soak-$name-$i.log)"
        fi
        [ "$(echo "$t > $slowest" | bc)" = 1 ] && slowest=$t
    done
    printf '%-11s %3d of %3d runs named the lost rank (slowest %.1f s)\n' "$name" "$ok" "$runs" "$slowest"
    [ "$ok" -eq "$runs" ] || failed=1
}

soak ring 1 "0 2" timeout 120 "$burst" run -n 3 --no-kill -- "$ring" --mask causal --layout zigzag --kill-rank 1
soak collective 3 "0 1 2" timeout 120 "$burst" run -n 4 --nodes 2 --no-kill -- "$worker" kill
soak large 1 "0" timeout 120 "$burst" run -n 2 --no-kill -- "$worker" kill-large
soak alltoall 3 "0 1 2" timeout 120 "$burst" run -n 4 --nodes 2 --no-kill -- "$worker" alltoall-kill

# A training run that writes a checkpoint every step; once the first is
# written, rank 2 gets SIGKILL from here after 0-0.5 s, while the ranks train
# and checkpoint (the launcher is told nothing: --no-kill, it only reports).
kill_during_training() {
    rm -rf "$tmp/ck" "$tmp/train.out"
    timeout 120 "$burst" run -n 4 --nodes 2 --no-kill -- "$burst" train \
        --config "$src/examples/quickstart.ini" --set train.steps=400 \
        --set train.checkpoint_every=1 --set "train.checkpoint_dir=$tmp/ck" \
        --set train.metrics= >"$tmp/train.out" 2>&1 &
    launcher=$!
    waited=0
    until [ -e "$tmp/ck/latest" ] || [ "$waited" -ge 600 ]; do
        sleep 0.1
        waited=$((waited + 1))
    done
    sleep "$(awk 'BEGIN { srand(); printf "%.2f", 0.5 * rand() }')"
    for pid in $(pgrep -f "checkpoint_dir=$tmp/ck"); do
        [ "$(tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | sed -n 's/^BURST_RANK=//p')" = 2 ] &&
            kill -9 "$pid"
    done
    killed=$(date +%s.%N)
    wait "$launcher"
    cat "$tmp/train.out"
    echo "soak: $(echo "$(date +%s.%N) - $killed" | bc) s from the kill to the end"
}
soak checkpoint 2 "0 1 3" kill_during_training

# Under srun: a Slurm of this machine's own (as tests/transport/test_slurm.sh).
slurm=$tmp/slurm
mkdir -p "$slurm"
if envf=$(sh "$src/tests/lib/slurm/start.sh" "$slurm" 2>/dev/null); then
    . "$envf"
    export BURST_SECRET_FILE="$slurm/secret"
    soak srun 2 "0 1" timeout 120 srun -n 3 --mpi=pmix "$worker" kill
    sh "$src/tests/lib/slurm/stop.sh" "$slurm" >/dev/null 2>&1
else
    echo "srun        not run: Slurm could not be started here (root and slurm-wlm needed)"
    failed=1
fi
exit "$failed"
