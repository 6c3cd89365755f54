#!/bin/sh
# test_hf.sh: Hugging Face models in and out, with transformers as the oracle
# (tests/train/hf_oracle.py, on the CPU, tiny random models built here):
#   import: `burst eval` of a Hugging Face folder, and of the checkpoint
#     `burst convert` makes of it, on 1 rank and on cp = 4 (zigzag, 2 emulated
#     nodes), gives transformers' NLL within 1e-4 relative: untied GQA 1:1 in
#     fp32, tied GQA 4:1 in bf16 with linear RoPE scaling and another theta,
#     llama3 RoPE in fp16, yarn RoPE, dynamic NTK, and a Mistral; on the
#     emulated device (CUDA builds) within 1e-3 (measured: 3e-5 and 1.1e-4), its products in bf16;
#     the comparison has teeth: a wrong theta moves the NLL past it;
#   export: 3 steps trained from the import, exported in fp32 and in bf16
#     shards, load in transformers with every key used; the fp32 export's NLL is
#     burst's within 1e-4, the bf16 export's within 2e-3 (its weights rounded);
#     importing the fp32 export gives the trained parameters bit for bit;
#   stages: a run from the import at another theta, seq_len and cp starts
#     from its parameters bit for bit; resuming it with another theta is
#     refused, and so is an init_from whose shape differs from a key given;
#   zero = 3: each rank reads its shard of the weights alone (a folder, a
#     checkpoint, the shards of another world) and trains with the losses
#     zero = 1 prints (4 decimals), on 3 ranks, and on 1 from two shards;
#   bad inputs (truncated file, tensor of another dtype, shape, missing or
#     extra, a config key we do not compute, an export over a folder in use)
#     exit 2 naming what is wrong and leave no output behind.
# The oracle is the venv build-aux/install-deps.sh test makes
# ($BURST_HF_ORACLE, default /opt/burst/hf-oracle); without it the test skips,
# and fails under CI=true.
set -u
: "${BURST:?BURST is not set (run through make check)}"
: "${BURST_TEST_SRCDIR:?BURST_TEST_SRCDIR is not set (run through make check)}"
PY=${BURST_HF_ORACLE:-/opt/burst/hf-oracle}/bin/python
export HF_HUB_OFFLINE=1 # everything is local: a missing folder must not reach for the hub
O=$BURST_TEST_SRCDIR/tests/train/hf_oracle.py
if ! "$PY" -c "import transformers, torch" 2>/dev/null; then
    echo "transformers not found at $PY (build-aux/install-deps.sh test installs it)"
    [ "${CI:-}" = true ] && exit 1
    exit 77
fi
T=$(mktemp -d /tmp/burst-test-hf-XXXXXX)
trap 'rm -rf "$T"' EXIT
cd "$T" || exit 1
# shellcheck source=tests/lib/expect.sh
. "$BURST_TEST_SRCDIR/tests/lib/expect.sh"
# close A B TOL: |A - B| <= TOL |B|
close() { awk -v a="$1" -v b="$2" -v t="$3" 'BEGIN { d = a - b; if (d < 0) d = -d;
    m = b < 0 ? -b : b; exit !(d <= t * m) }'; }
agree_not() {
    if close "$2" "$3" 1e-3; then fail "$1: $2 agrees with $3 (tolerance 1e-3)"
    else echo "ok: $1 differs: $2, not $3"; fi
}
SEQ=64 SAMPLES=6
oracle() { "$PY" "$O" nll "$1" t.npy --seq $SEQ --samples $SAMPLES | sed 's/.*"nll": \([^,]*\),.*/\1/'; }
# burst_nll MODEL [RANKS ARGS...]: burst eval's NLL
burst_nll() {
    model=$1 ranks=${2:-1}
    shift 2 2>/dev/null || shift 1
    "$BURST" run -n "$ranks" --nodes "$([ "$ranks" -ge 4 ] && echo 2 || echo 1)" -- "$BURST" eval \
        --init-from "$model" --data c.h5 --set data.seq_len=$SEQ --samples $SAMPLES \
        --set parallel.cp="$ranks" "$@" 2>&1 | sed -n 's/.*eval: nll \([0-9.]*\) over.*/\1/p'
}
# agree WHAT WANT GOT TOL
agree() {
    if [ -z "$3" ] || ! close "$3" "$2" "$4"; then fail "$1: burst $3, transformers $2 (tolerance $4)"
    else echo "ok: $1: $3 (transformers $2)"; fi
}

"$PY" "$O" tokens t.npy --n 4000 --vocab 96
"$BURST" data import --from npy t.npy -o c.h5 --vocab 96 >/dev/null || fail "data import"
dims="--vocab 96 --hidden 64 --layers 2 --heads 4 --ff 96"
"$PY" "$O" make a $dims --kv 4 || fail "make a"
"$PY" "$O" make b $dims --kv 1 --tied --dtype bfloat16 --theta 500 \
    --rope-scaling '{"rope_type": "linear", "factor": 4.0}' || fail "make b"
# llama3 and yarn over a 64-token original context: every band of llama3 and
# yarn's ramp hold pairs of a 16-wide head at the lengths evaluated
"$PY" "$O" make c $dims --kv 2 --dtype float16 --rope-scaling '{"rope_type": "llama3", "factor": 8.0,
    "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 64}' ||
    fail "make c"
"$PY" "$O" make d $dims --kv 2 --tied --max-pos 64 \
    --rope-scaling '{"rope_type": "yarn", "factor": 4.0}' || fail "make d"
"$PY" "$O" make e $dims --kv 2 --arch mistral || fail "make e"
"$PY" "$O" make f $dims --kv 4 --max-pos 32 --rope-scaling '{"rope_type": "dynamic", "factor": 2.0}' ||
    fail "make f" # dynamic NTK: 64-token windows beyond a 32-token context

# ---- import
for m in a b c d e f; do
    want=$(oracle $m)
    agree "$m, Hugging Face folder, 1 rank" "$want" "$(burst_nll $m 1)" 1e-4
    expect 0 "burst convert: $m -> ck-$m" "$BURST" convert --from hf --to burst $m ck-$m
    ! h5ls ck-$m/step-0/shard-0.h5 | grep -q '^m ' || fail "ck-$m has optimizer state"
    agree "$m, checkpoint, 1 rank" "$want" "$(burst_nll ck-$m 1)" 1e-4
    agree "$m, checkpoint step-0, cp 4 on 2 nodes" "$want" \
        "$(burst_nll ck-$m/step-0 4 --set parallel.layout=zigzag)" 1e-4
done
agree_not "a at another theta" "$(burst_nll a 1 --set model.rope_theta=20000)" "$(oracle a)"

# on the emulated device: bf16 products, the ring on device buffers
EMU=${BURST_TEST_BUILDDIR:-}/tests/train/burst_emu
if [ -x "$EMU" ]; then
    for m in a c; do
        got=$("$EMU" eval --init-from $m --data c.h5 --set data.seq_len=$SEQ --samples $SAMPLES \
            --set train.device=cuda 2>&1 | sed -n 's/.*eval: nll \([0-9.]*\) over.*/\1/p')
        agree "$m on the emulated device" "$(oracle $m)" "$got" 1e-3
    done
fi
# the scalings matter: each model evaluated without its own differs
agree_not "c without llama3" "$(burst_nll c 1 --set model.rope_type=default --set model.rope_scaling=1)" "$(oracle c)"
agree_not "d without yarn" "$(burst_nll d 1 --set model.rope_type=default --set model.rope_scaling=1)" "$(oracle d)"
agree_not "f without dynamic" "$(burst_nll f 1 --set model.rope_type=default --set model.rope_scaling=1)" "$(oracle f)"

# ---- export
expect 0 "checkpoint: run/step-3" "$BURST" train --set model.init_from=ck-a --set data.source=hdf5 \
    --set data.path=c.h5 --set data.seq_len=$SEQ --set train.steps=3 --set train.warmup_steps=1 \
    --set train.lr=0.01 --set train.checkpoint_dir=run
trained=$(burst_nll run 1)
expect 0 "-> out32" "$BURST" convert --from burst --to hf run out32 --dtype fp32
expect 0 "every key loaded" "$PY" "$O" load out32
agree "export fp32" "$(oracle out32)" "$trained" 1e-4
expect 0 "-> back" "$BURST" convert --from hf --to burst out32 back
h5diff run/step-3/shard-0.h5 back/step-0/shard-0.h5 /params /params >/dev/null ||
    fail "import(export(run)) is not run's parameters bit for bit"
expect 0 "-> out16" "$BURST" convert --from burst --to hf run out16 --shard-size 40K
shards=$(ls out16 | grep -c '^model-.*-of-.*\.safetensors$')
[ -f out16/model.safetensors.index.json ] && [ "$shards" -ge 3 ] ||
    fail "a 40K shard size did not give shards and an index: $(ls out16 | tr '\n' ' ')"
expect 0 "every key loaded" "$PY" "$O" load out16
agree "export bf16, $shards shards" "$(oracle out16)" "$trained" 2e-3
for m in c d f; do # the scaling goes out as it came in
    expect 0 "-> out-$m" "$BURST" convert --from burst --to hf ck-$m out-$m --dtype fp32
    agree "export of $m's scaling" "$(oracle $m)" "$(oracle out-$m)" 1e-6
done
mkdir tok && echo '{"version": "1.0"}' >tok/tokenizer.json && echo '{}' >tok/tokenizer_config.json
expect 0 "-> out-tok" "$BURST" convert --from burst --to hf ck-a out-tok --tokenizer tok
cmp -s tok/tokenizer.json out-tok/tokenizer.json && cmp -s tok/tokenizer_config.json \
    out-tok/tokenizer_config.json || fail "--tokenizer did not copy tok's files: $(ls out-tok)"
expect 2 "--tokenizer a: no tokenizer.json" "$BURST" convert --from burst --to hf ck-a out-notok --tokenizer a
[ ! -e out-notok ] || fail "a refused --tokenizer left out-notok behind"

# ---- stages: another theta, seq_len and cp; a step of lr 1e-30 rounds away
# (|update| <= lr), so the checkpoint after it holds the parameters it started from
expect 0 "checkpoint: stage/step-1" "$BURST" run -n 2 -- "$BURST" train --set model.init_from=ck-a \
    --set model.rope_theta=40000 --set data.source=hdf5 --set data.path=c.h5 --set data.seq_len=128 \
    --set parallel.cp=2 --set train.steps=2 --set train.warmup_steps=1 --set train.lr=1e-30 \
    --set train.min_lr=0 --set train.weight_decay=0 --set train.checkpoint_dir=stage --stop-after 1
# stage's two shards, whole, against ck-a's one: both exported in fp32
expect 0 "-> ck-a32" "$BURST" convert --from burst --to hf ck-a ck-a32 --dtype fp32
expect 0 "-> stage32" "$BURST" convert --from burst --to hf stage stage32 --dtype fp32
cmp -s ck-a32/model.safetensors stage32/model.safetensors ||
    fail "a run from ck-a at lr 1e-30 does not hold ck-a's parameters"
expect 2 "rope_theta" "$BURST" run -n 2 -- "$BURST" train --set model.init_from=ck-a \
    --set model.rope_theta=80000 --set data.source=hdf5 --set data.path=c.h5 --set data.seq_len=128 \
    --set parallel.cp=2 --set train.steps=2 --set train.warmup_steps=1 --set train.lr=1e-30 \
    --set train.min_lr=0 --set train.weight_decay=0 --set train.checkpoint_dir=stage --resume
expect 2 "[model] d_model = 128, but ck-a has 64" "$BURST" train --set model.init_from=ck-a \
    --set model.d_model=128 --print-config

# ---- zero = 3: each rank reads its shard of init_from alone (from a Hugging
# Face folder, a checkpoint of one shard, and stage's two shards read by
# another world) and trains as zero = 1, which reads the whole: the same
# printed losses
# losses() SOURCE RANKS ZERO: the losses of 2 steps from SOURCE
losses() {
    "$BURST" run -n "$2" -- "$BURST" train --set model.init_from="$1" --set data.source=hdf5 \
        --set data.path=c.h5 --set data.seq_len=$SEQ --set parallel.dp="$2" --set train.steps=2 \
        --set train.warmup_steps=1 --set train.lr=0.01 --set parallel.zero="$3" 2>&1 |
        sed -n 's/.*step *\([0-9]\)\/2  loss \([0-9.]*\).*/\1:\2/p' | tr '\n' ' '
}
for run in "a 3" "ck-a 3" "stage 3" "stage 1"; do
    set -- $run
    want=$(losses "$1" "$2" 1) got=$(losses "$1" "$2" 3)
    if [ -n "$want" ] && [ "$got" = "$want" ]; then echo "ok: zero = 3 from $1 on $2: $got"
    else fail "zero = 3 from $1 on $2 ranks: '$got', zero = 1: '$want'"; fi
done

# ---- bad inputs: exit 2, the culprit named, nothing written
bad() { # bad FOLDER NEEDLE
    expect 2 "$2" "$BURST" convert --from hf --to burst "$1" out-bad
    [ ! -e out-bad ] || { fail "$1 left out-bad behind"; rm -rf out-bad; }
}
cp -r a trunc && truncate -s -100 trunc/model.safetensors
bad trunc "past the end of the data"
for k in dtype missing extra shape; do "$PY" "$O" corrupt a c-$k --kind $k; done
bad c-dtype "dtype I64, expected F32, F16 or BF16"
bad c-missing "no tensor 'model.layers.0.self_attn.k_proj.weight'"
bad c-extra "tensor 'model.layers.0.self_attn.q_proj.bias' is not part of the model"
bad c-shape "model.layers.0.self_attn.k_proj.weight' has shape [63, 64]"
edit() { # edit NAME SED: a copy of a with config.json edited
    cp -r a "$1" && sed -i "$2" "$1/config.json"
}
edit k-bias 's/"attention_bias": false/"attention_bias": true/'
bad k-bias "attention_bias = true"
edit k-type 's/"model_type": "llama"/"model_type": "gpt2"/'
bad k-type "model_type = 'gpt2'"
edit k-act 's/"hidden_act": "silu"/"hidden_act": "gelu"/'
bad k-act "hidden_act = 'gelu'"
edit k-rope 's/"rope_scaling": null/"rope_scaling": {"rope_type": "longrope", "factor": 8.0}/'
bad k-rope "rope_scaling.rope_type = 'longrope'"
mkdir busy && echo x >busy/keep
expect 2 "busy exists and is not empty" "$BURST" convert --from burst --to hf run busy
[ "$(ls busy)" = keep ] && [ ! -e busy.tmp ] || fail "a refused export touched busy: $(ls busy)"
expect 2 "neither a burst checkpoint" "$BURST" eval --init-from nowhere --data c.h5
# eval makes no gradients and no optimizer
expect 2 "burst eval: a rank needs" "$BURST" eval --init-from a --data c.h5 --set memory.limit_bytes=1000
case $out in *"gradients 0.0 B, optimizer 0.0 B"*) ;; *) fail "eval counts gradients or an optimizer: $out" ;; esac

[ "$fails" -eq 0 ] || { echo "$fails failure(s)"; exit 1; }
echo "all Hugging Face checks passed"
