#!/bin/sh
# device-run.sh: runs on a machine with a GPU from the bundle that
# build-aux/device-bundle.sh made (bundle.tar.xz beside this file, unpacked
# into ${BURST_BUNDLE_DIR:-/tmp/burst-bundle}), writing each part's log into
# $OUT (default: out/ beside this file) and printing its exit.
#
#   sh device-run.sh tests              # nvidia-smi, the CUDA test programs
#   sh device-run.sh sanitize [TOOLS]   # the CUDA test programs under NVIDIA's
#                                       # compute-sanitizer (default: memcheck
#                                       # racecheck synccheck), each program under
#                                       # ${BURST_SANITIZE_TIMEOUT:-150} s
#   sh device-run.sh train              # the default run on the CPU and on the GPU
#                                       # (1 rank), then 4 ranks sharing it (cp = 4)
#   sh device-run.sh 1m [SETTINGS...]   # 300m on 1,048,576 tokens, 3 steps
#   sh device-run.sh kernels [ARGS...]  # burst bench kernels --device cuda ARGS
#   sh device-run.sh bench [ARGS...]    # burst bench train --device cuda ARGS
#   sh device-run.sh plan [ARGS...]     # burst plan memory ARGS (what the run will need)
#   sh device-run.sh plan-time          # burst plan time for 300m and 1b at 32K on this
#                                       # card's profiles beside the measured steps
#                                       # (bench train, kernel burst, the same keys)
#   sh device-run.sh cudnn              # cuDNN's attention: its graphs validated, the
#                                       # ring on it against the double reference (2
#                                       # ranks sharing the GPU), bench kernels with both
#                                       # kernels, bench train 300m and 1b at 32K with each
#
# CUDA's libraries come from the machine: /usr/local/cuda, else the lib/
# folders of the `nvidia` wheels of its python3 (a PyTorch installation).
set -u
bundle=$(cd "$(dirname "$0")" && pwd)
here=${BURST_BUNDLE_DIR:-/tmp/burst-bundle}
out=${OUT:-$bundle/out}
mkdir -p "$out" "$here"
if ! tar -C "$here" -xJf "$bundle/bundle.tar.xz" 2>/dev/null &&
    ! python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' \
        "$bundle/bundle.tar.xz" "$here"; then
    echo "device-run: cannot unpack $bundle/bundle.tar.xz" >&2
    exit 1
fi
cuda_libs=/usr/local/cuda/lib64
for d in $(python3 -c 'import nvidia, os
for p in nvidia.__path__:
    for d in sorted(os.listdir(p)):
        print(os.path.join(p, d, "lib"))' 2>/dev/null); do
    [ -d "$d" ] && cuda_libs="$cuda_libs:$d"
done
export LD_LIBRARY_PATH="$here/lib:$cuda_libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
burst=$here/bin/burst
status=0

# part NAME COMMAND...: COMMAND's output into $out/NAME.log, its exit printed
part() {
    name=$1
    shift
    echo "== $name: $*"
    "$@" > "$out/$name.log" 2>&1
    rc=$?
    tail -n 5 "$out/$name.log"
    echo "== $name: exit $rc"
    [ $rc -eq 0 ] || status=1
}

what=${1:-tests}
[ $# -gt 0 ] && shift
case $what in
tests)
    echo "commit $(cat "$here/commit")"
    nvidia-smi > "$out/nvidia-smi.log" 2>&1
    if ldd "$burst" | grep 'not found'; then
        echo "device-run: libraries missing (above)" >&2
        exit 1
    fi
    for t in ops attention streams; do part "test_dev_${t}_cuda" "$here/bin/test_dev_${t}_cuda"; done
    ;;
sanitize)
    # The emulator's checks (doc/KERNELS.md) are meant to catch what these
    # tools catch on a GPU; a finding here that the emulator missed is a gap in it.
    cs=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -n 1)
    if [ -z "$cs" ]; then
        echo "device-run: compute-sanitizer not found" >&2
        exit 1
    fi
    for tool in ${*:-memcheck racecheck synccheck}; do
        for t in ops attention streams; do
            part "sanitize-$tool-$t" env CK_FORK=no timeout "${BURST_SANITIZE_TIMEOUT:-150}" "$cs" --tool "$tool" \
                --error-exitcode 3 --target-processes all "$here/bin/test_dev_${t}_cuda"
        done
    done
    ;;
train)
    part train-1-cpu "$burst" train --set train.steps=50 --set train.metrics="$out/cpu.jsonl"
    part train-1 "$burst" train --set train.device=cuda --set train.steps=50 \
        --set train.metrics="$out/cuda.jsonl"
    part train-4-sharing "$burst" run -n 4 -- "$burst" train --set train.device=cuda \
        --set parallel.cp=4 --set train.steps=50
    ;;
1m)
    part train-300m-1m "$burst" train --set train.device=cuda --set model.preset=300m \
        --set data.seq_len=1048576 --set train.steps=3 --set train.warmup_steps=1 "$@"
    ;;
kernels)
    part bench-kernels "$burst" bench kernels --device cuda "$@"
    ;;
bench)
    part bench-train "$burst" bench train --device cuda "$@"
    ;;
plan)
    part plan-memory "$burst" plan memory "$@"
    ;;
plan-time)
    card=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1)
    case $card in *H200*) p=h200 ;; *) p=h100 ;; esac
    for m in 300m 1b; do
        part "plan-time-$m" "$burst" plan time --profile "$here/profiles/$p-sxm.json" \
            --profile "$here/profiles/$p-attention-burst.json" --set model.preset=$m \
            --set data.seq_len=32768 --set train.device=cuda --set attention.kernel=burst \
            --set memory.attn_kept_fraction=0.5 --set memory.keep_layers=false \
            --set parallel.zero=1 --set data.task=counting
    done
    part bench-train-plan "$burst" bench train --device cuda --models 300m,1b --ranks 1 \
        --seq 32K --steps 3 --mem-seq 0 --peak-tflops 989 --kernel burst
    ;;
cudnn)
    echo "commit $(cat "$here/commit")"
    part cudnn-validate "$here/bin/test_cudnn_validate"
    for case in causal:zigzag window:contiguous none:contiguous; do
        part "ring-sdpa-${case%%:*}" "$burst" run -n 2 -- "$here/bin/ring_worker" \
            --mask "${case%%:*}" --layout "${case#*:}" --device 1 --in-bytes 2 --sdpa 1
    done
    part bench-kernels-cudnn "$burst" bench kernels --device cuda --kernel burst,cudnn \
        --seq 4096 --seq 16384 --seq 32768 --no-ops
    for k in cudnn burst; do
        part "bench-train-$k" "$burst" bench train --device cuda --models 300m,1b --ranks 1 \
            --seq 32K --steps 3 --mem-seq 0 --peak-tflops 989 --kernel "$k"
    done
    # what [memory] attn_kept_fraction = auto takes on one 80 GiB GPU at 32K (burst plan
    # memory): every attention output kept, against the 0.5 of the runs above
    part bench-train-cudnn-kept "$burst" bench train --device cuda --models 300m,1b --ranks 1 \
        --seq 32K --steps 3 --mem-seq 0 --peak-tflops 989 --kernel cudnn --attn-kept-fraction 1
    ;;
*)
    echo "device-run: unknown part '$what' (tests, sanitize, train, 1m, kernels, bench, plan, plan-time or cudnn)" >&2
    exit 2
    ;;
esac
exit $status
