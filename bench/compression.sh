#!/usr/bin/env bash
# Gradient compression on the default small GPT (configs/default.toml) at dp = 2: each compressor
# against the uncompressed run with the same steps, seed and batches. For each it prints the
# validation loss change, the traffic actually sent (bytes per step over the data-parallel group,
# from metrics.jsonl) and the compression ratio achieved against the dense run; then, from the
# planner, the predicted step time of GPT-2 124M on 64 data-parallel ranks with one 25 GB/s link
# each, per compressor, against no compression.
#
#   bench/compression.sh               # 600 steps each
#   STEPS=300 bench/compression.sh
#
# Every method warms up for STEPS/5 steps of exact (dense) reduction, as 1-bit Adam (optim.name =
# onebit_adam, optim.freeze_step) must and as the PowerSGD and 1-bit Adam papers recommend
# (15-25 % of training); top-k's ratio then ramps down over as many steps again. topk also freezes
# AdamW's variance at the end of its warm-up (optim.variance_freeze_step): error feedback then
# sums to the exact gradients through Adam's update, which a live variance prevents (a coordinate
# sent once in K steps arrives as one K-times-larger value that v normalizes away). "topk_live_v"
# is the same without the freeze, for comparison.
#
# Environment: STEPS (default 600), METHODS (default "none topk qsgd onebit powersgd onebit_adam"; none first;
# topk_live_v may be added), TESSERA (the binary; default build/release/src/cli/tessera),
# DATA (the prepared corpus; default data/kjv, prepared when missing), OUT (run folders; default
# build/bench/compression).
#
# Prints:
#   RESULT compression method=<m> ratio=<dense bytes / its bytes, per step once compressing at its full rate> val_loss=<X> val_loss_delta=<(X - dense) / dense> run_ratio=<the same over the whole run, warm-up included>
#   RESULT compression_plan method=<m> model=gpt2-124m dp=64 link_gbps=25 step_seconds=<s> gain=<dense step / its step>
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TESSERA="${TESSERA:-$ROOT/build/release/src/cli/tessera}"
STEPS="${STEPS:-600}"
DATA="${DATA:-$ROOT/data/kjv}"
OUT="${OUT:-$ROOT/build/bench/compression}"

if [[ ! -x $TESSERA ]]; then
  echo "no tessera binary at $TESSERA: build it first (cmake --preset release -G Ninja && cmake --build --preset release)" >&2
  exit 2
fi
if [[ ! -f $DATA/data.json ]]; then
  echo "== preparing the King James Bible in $DATA"
  "$TESSERA" data prepare --input kjv --out "$DATA" --vocab-size 4096
fi
echo "== $(date -u '+%Y-%m-%d %H:%M UTC'), $(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc) cores, /proc/loadavg: $(cat /proc/loadavg)"
export OMP_NUM_THREADS=1  # one thread per rank: the two ranks share the machine's cores

val_loss() { grep '"kind":"val"' "$1/metrics.jsonl" | tail -n 1 | sed -E 's/.*"loss":([-0-9.eE+]+).*/\1/'; }
FREEZE=$((STEPS / 5))
# Mean bytes per step sent over the data-parallel group once a method compresses at its full rate
# (ratio), and over the whole run (run_ratio): after the dense warm-up, and top-k's ramp after it.
first_compressed_step() {
  case $1 in
    */topk | */topk_live_v | */powersgd) echo $((2 * FREEZE + 1)) ;;
    *) echo $((FREEZE + 1)) ;;
  esac
}
bytes_per_step() {
  local from=1
  [[ ${2:-} == compressed ]] && from=$(first_compressed_step "$1")
  grep '"kind":"train"' "$1/metrics.jsonl" | tail -n +"$from" |
    sed -E 's/.*"dp_bytes_sent":([-0-9.eE+]+).*/\1/' | awk '{ s += $1; n++ } END { printf "%.0f", s / n }'
}

declare -A ARGS=(
  [none]="--parallel.compression none"
  [topk]="--parallel.compression topk --compression.ratio 0.01 --compression.warmup_steps $FREEZE --optim.variance_freeze_step $FREEZE"
  [topk_live_v]="--parallel.compression topk --compression.ratio 0.01 --compression.warmup_steps $FREEZE"
  [qsgd]="--parallel.compression qsgd --compression.warmup_steps $FREEZE"
  [onebit]="--parallel.compression onebit --compression.warmup_steps $FREEZE"
  [powersgd]="--parallel.compression powersgd --compression.rank 4 --compression.warmup_steps $FREEZE"
  [onebit_adam]="--optim.name onebit_adam --optim.freeze_step $FREEZE"
)
read -r -a METHODS <<< "${METHODS:-none topk qsgd onebit powersgd onebit_adam}"
[[ ${METHODS[0]} == none ]] || { echo "METHODS must start with none (the dense run the others are compared with)" >&2; exit 2; }
for method in "${METHODS[@]}"; do
  echo "== $method: $STEPS steps, dp 2"
  # shellcheck disable=SC2086
  "$TESSERA" launch -n 2 -- train --config "$ROOT/configs/default.toml" --data.dir "$DATA" \
    --train.out_dir "$OUT/$method" --train.overwrite true --train.steps "$STEPS" --train.micro_batch_size 8 \
    --parallel.dp 2 --checkpoint.every 0 --train.sample_tokens 0 --log.progress plain ${ARGS[$method]} | tail -n 3
done
dense_loss=$(val_loss "$OUT/none")
dense_bytes=$(bytes_per_step "$OUT/none" compressed)
for method in "${METHODS[@]}"; do
  loss=$(val_loss "$OUT/$method")
  bytes=$(bytes_per_step "$OUT/$method" compressed)
  run_bytes=$(bytes_per_step "$OUT/$method")
  awk -v m="$method" -v l="$loss" -v d="$dense_loss" -v b="$bytes" -v rb="$run_bytes" -v db="$dense_bytes" \
    'BEGIN { printf "RESULT compression method=%s ratio=%.1f val_loss=%.4f val_loss_delta=%.4f run_ratio=%.1f\n", m, db / b, l, (l - d) / d, db / rb }'
done

# The planner: GPT-2 124M, 64 data-parallel ranks, every rank on its own 25 GB/s link.
cluster=$(mktemp --suffix=.toml)
trap 'rm -f "$cluster"' EXIT
sed -e 's/^devices_per_node = 8/devices_per_node = 1/' -e 's/^nodes = 560/nodes = 64/' \
  -e 's/^name = "a100-80gb"/name = "a100-25gbps-per-rank"/' "$ROOT/configs/clusters/a100-80gb.toml" > "$cluster"
plan_step() {
  "$TESSERA" plan --model gpt2-124m --cluster "$cluster" --devices 64 --global-batch 512 --layout "dp=64,mb=8$1" |
    awk '$1 == "step" { print $2 }'
}
dense_step=$(plan_step "")
for method in "${METHODS[@]}"; do
  case $method in
    none) extra="" ;;
    topk | topk_live_v) extra=",compression=topk,compression_ratio=0.01" ;;
    powersgd) extra=",compression=powersgd,compression_rank=4" ;;
    onebit_adam) extra=",optimizer=onebit_adam" ;;
    *) extra=",compression=$method" ;;
  esac
  step_seconds=$(plan_step "$extra")
  awk -v m="$method" -v s="$step_seconds" -v d="$dense_step" \
    'BEGIN { printf "RESULT compression_plan method=%s model=gpt2-124m dp=64 link_gbps=25 step_seconds=%.4f gain=%.2f\n", m, s, d / s }'
done
