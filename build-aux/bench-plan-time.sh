#!/bin/sh
# bench-plan-time.sh: `burst plan time`'s predicted step time against steps
# measured on this machine, CPU ranks over UCX shared memory (`burst run`).
# First the profiles, measured just before on the same machine: the kernels
# with 2 threads (one rank has both cores) and with 1 thread (each of two
# ranks has one), the link between two ranks; the emulated nodes' network
# row is derived from that link (the nodes share one machine's memory). Then
# for each configuration a 3-step `burst train` (steps 2 and 3 averaged) and
# the plan of the same configuration. A benchmark: nothing fails on a ratio;
# run it alone on the machine. Prints a Markdown table.
#   BURST  the program (default: _build/burst)
#   $1     a directory for the profiles and logs (default: bench-plan-time)
#   BENCH_PLAN_TIME_QUICK=1  4K and 8K only
#   BENCH_PLAN_TIME_ONLY=GLOB the runs whose names match (e.g. '2ranks-gqa-*'), with
#                            the profiles already in $1 when they are there
set -eu
burst=${BURST:-_build/burst}
out=${1:-bench-plan-time}
mkdir -p "$out"
quick=${BENCH_PLAN_TIME_QUICK:-0}
only=${BENCH_PLAN_TIME_ONLY:-}

if [ -z "$only" ] || [ ! -f "$out/cpu-nodes.json" ]; then
echo "== profiles (into $out)" >&2
OMP_NUM_THREADS=2 "$burst" bench kernels --seq 2048 --seq 4096 --seq 8192 --seq 16384 --d 64 \
    --hkv 8 --reps 1 --profile-out "$out/cpu-1rank.json" >"$out/kernels-1rank.log"
OMP_NUM_THREADS=1 "$burst" bench kernels --seq 1024 --seq 2048 --seq 4096 --seq 8192 --d 64 \
    --hkv 8 --reps 1 --profile-out "$out/cpu-2ranks.json" >"$out/kernels-2ranks.log"
"$burst" bench transport --ranks 2 --profile-out "$out/cpu-link.json" >"$out/transport.log"
link=$(grep '"path":"intra"' "$out/cpu-link.json")
gbps=$(echo "$link" | sed 's/.*"gbps":\([0-9.e+-]*\).*/\1/')
lat=$(echo "$link" | sed 's/.*"latency_us":\([0-9.e+-]*\).*/\1/')
cat >"$out/cpu-nodes.json" <<EOF
{"profile": "cpu-nodes", "device": "burst run --nodes: emulated nodes of one machine",
 "rows": [{"row": "link", "path": "inter", "gbps": $gbps, "latency_us": $lat, "per_node": 1,
  "derived": "the intra link of $out/cpu-link.json: emulated nodes share this machine's memory"}]}
EOF
fi

# Four ranks on the two cores, one thread each, share a core two by two: each
# rank computes at half the one-thread rates (derived, not measured).
python3 - "$out" <<'EOF'
import json, sys
out = sys.argv[1]
p = json.load(open(out + "/cpu-2ranks.json"))
for r in p["rows"]:
    for k in ("gflops", "gbps"):
        if k in r:
            r[k] /= 2
    r.pop("measured", None)
    r["derived"] = "half the one-thread rate of cpu-2ranks.json: 4 ranks share 2 cores"
p["profile"] = "cpu-4ranks"
json.dump(p, open(out + "/cpu-4ranks.json", "w"), indent=1)
EOF

# One configuration: name, ranks, nodes, threads per rank, tokens, then --set
# assignments of both the run and the plan.
measure() {
    name=$1 ranks=$2 nodes=$3 threads=$4 seq=$5
    shift 5
    # shellcheck disable=SC2254 # $only is a pattern
    case $name in ${only:-*}) ;; *) return 0 ;; esac
    sets="--set model.preset=small --set data.task=counting --set data.seq_len=$seq"
    sets="$sets --set parallel.cp=$ranks --set parallel.zero=1"
    for kv in "$@"; do sets="$sets --set $kv"; done
    profile="$out/cpu-1rank.json"
    [ "$ranks" -gt 1 ] && profile="$out/cpu-2ranks.json --profile $out/cpu-link.json"
    [ "$ranks" -gt 2 ] && profile="$out/cpu-4ranks.json --profile $out/cpu-link.json"
    [ "$nodes" -gt 1 ] && profile="$profile --profile $out/cpu-nodes.json"
    rm -f "$out/$name.metrics"
    # shellcheck disable=SC2086
    OMP_NUM_THREADS=$threads OPENBLAS_NUM_THREADS=$threads "$burst" run -n "$ranks" \
        --nodes "$nodes" -- "$burst" train $sets --set train.steps=3 --set train.warmup_steps=1 \
        --set transport.timeout=3600 --set "train.metrics=$out/$name.metrics" >"$out/$name.log" 2>&1
    measured=$(sed -n 's/.*"step": \([23]\),.*"seconds": \([0-9.e+-]*\)}.*/\2/p' "$out/$name.metrics" |
        awk '{s += $1; n++} END {if (n) printf "%.3f", s / n}')
    # shellcheck disable=SC2086
    "$burst" plan time --profile $profile --ranks "$ranks" --gpus-per-node $((ranks / nodes)) \
        $sets >"$out/$name.plan"
    predicted=$(sed -n 's/^step time \([0-9.e+-]*\) s.*/\1/p' "$out/$name.plan")
    echo "| $name | $ranks | $nodes | $seq | $* | $measured | $predicted |" \
        "$(awk -v m="$measured" -v p="$predicted" 'BEGIN {printf "%.2f", p / m}') |"
}

echo "| run | ranks | nodes | seq | keys | measured s/step | predicted s/step | predicted / measured |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- |"
seqs="4096 8192"
[ "$quick" = 1 ] || seqs="4096 8192 16384"
for seq in $seqs; do
    measure "1rank-$seq" 1 1 2 "$seq" memory.attn_kept_fraction=0.5 memory.keep_layers=false
    measure "2ranks-$seq" 2 1 1 "$seq" memory.attn_kept_fraction=0.5 memory.keep_layers=false
done
for kept in 0 1; do
    measure "1rank-kept$kept" 1 1 2 8192 memory.attn_kept_fraction=$kept memory.keep_layers=false
    measure "2ranks-kept$kept" 2 1 1 8192 memory.attn_kept_fraction=$kept memory.keep_layers=false
done
for bwd in q kv; do
    measure "2ranks-$bwd" 2 1 1 8192 parallel.backward=$bwd memory.attn_kept_fraction=0.5 \
        memory.keep_layers=false
done
# GQA (Hkv = 2): the direction that sends fewer bytes turns to KV-side
for bwd in q kv; do
    measure "2ranks-gqa-$bwd" 2 1 1 8192 model.n_kv_heads=2 parallel.backward=$bwd \
        memory.attn_kept_fraction=0.5 memory.keep_layers=false
done
for ring in flat double; do
    measure "2nodes-$ring" 2 2 1 8192 parallel.ring=$ring memory.attn_kept_fraction=0.5 \
        memory.keep_layers=false
done
# oversubscribed: 4 ranks of one thread on 2 cores (the rates derived above)
measure "4ranks-oversubscribed" 4 1 1 8192 memory.attn_kept_fraction=0.5 memory.keep_layers=false
measure "4ranks-2nodes-double" 4 2 1 8192 parallel.ring=double memory.attn_kept_fraction=0.5 \
    memory.keep_layers=false
measure "4ranks-2nodes-flat" 4 2 1 8192 parallel.ring=flat memory.attn_kept_fraction=0.5 \
    memory.keep_layers=false
