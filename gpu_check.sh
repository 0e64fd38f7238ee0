#!/usr/bin/env bash
# What one GPU does with nanoloop, in one go (meant to take ~8 minutes on an H100-class GPU):
#   1. bench.py --compile=True in bf16: step times, tokens/s, MFU against the GPU's bf16 peak
#   2. 300 steps of config/v13.py (d=320, [1][A x10][B x10][C x10][1]) in bf16, compiled, on
#      the topics data in GPT-2 tokens: tokens/s and peak GPU memory in its log lines
#   3. sample.py and eval.py on that checkpoint
# Every step's command and output go to $OUT/<step>.log, the headline figures to $OUT/summary.txt
# (OUT unset: ./gpu_check/). Run it from the repo root, or anywhere: data/ and the run's out_dir
# are made in the current folder.
#   $ MIRROR=../shared/data TIKTOKEN_CACHE_DIR=../shared/tiktoken bash gpu_check.sh
# MIRROR: a folder laid out as <host>/<path> holding the topic sources (prepare.py --mirror);
# unset, prepare.py downloads them (and tiktoken its GPT-2 files). A machine without internet
# needs both, or data/topics/ prepared beforehand (it is skipped when present).
# Smaller or elsewhere (the tests run it so on a CPU): DEVICE=cpu COMPILE=False DATASET=name
# (a prepared data/<name>/), and BENCH_ARGS, TRAIN_ARGS, SAMPLE_ARGS, EVAL_ARGS: extra --key=value
# arguments, which override the ones below.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
OUT=${OUT:-gpu_check}
DEVICE=${DEVICE:-cuda}
COMPILE=${COMPILE:-True}
DATASET=${DATASET:-topics}
RUN=$OUT/out-v13
mkdir -p "$OUT"

step() {  # step NAME COMMAND...: run it; command and output to $OUT/NAME.log, seconds to times.txt
    local name=$1 t0=$SECONDS
    shift
    echo "\$ $(printf '%q ' "$@")" | tee "$OUT/$name.log"  # the command, as it would run typed
    "$@" 2>&1 | tee -a "$OUT/$name.log"
    echo "$name: $((SECONDS - t0)) s" | tee -a "$OUT/times.txt"
}

: > "$OUT/times.txt"
if [ ! -f "data/$DATASET/meta.json" ]; then
    step prepare python "$HERE/prepare.py" --dataset="$DATASET" ${MIRROR:+--mirror="$MIRROR"}
fi
# (the *_ARGS are left unquoted on purpose: each is several --key=value words)
step bench python "$HERE/bench.py" --device="$DEVICE" --compile="$COMPILE" --phantom_ks="(1,30)" \
    --repeats=3 ${BENCH_ARGS:-}
step train python "$HERE/train.py" "$HERE/config/v13.py" --dataset="$DATASET" --out_dir="$RUN" \
    --device="$DEVICE" --compile="$COMPILE" --max_iters=300 --warmup_iters=30 \
    --lr_decay_iters=300 --eval_interval=300 --log_interval=50 --overwrite=True ${TRAIN_ARGS:-}
step sample python "$HERE/sample.py" --out_dir="$RUN" --device="$DEVICE" --num_samples=2 \
    --max_new_tokens=100 --start="Question: Tom has 12 apples and buys 7 more. How many now?" \
    ${SAMPLE_ARGS:-}
step eval python "$HERE/eval.py" --out_dir="$RUN" --device="$DEVICE" ${EVAL_ARGS:-}

{   # the headline figures, each under the command behind it
    head -n 1 "$OUT/bench.log"
    grep -E -m 2 ', torch |^dtype: ' "$OUT/bench.log"  # the machine; the dtypes and why
    grep -E '^\| train' "$OUT/bench.log"
    head -n 1 "$OUT/train.log"
    grep -E '^parameters|training from' "$OUT/train.log"
    grep -E '^iter [0-9]+: (loss|train loss)' "$OUT/train.log" | tail -n 2
    head -n 1 "$OUT/sample.log"
    grep -E '^\[.*tok/s' "$OUT/sample.log"
    head -n 1 "$OUT/eval.log"
    grep -E '^suffix NLL|^(bfloat16|float32)' "$OUT/eval.log"
    cat "$OUT/times.txt"
} > "$OUT/summary.txt"
cat "$OUT/summary.txt"
