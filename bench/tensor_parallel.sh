#!/usr/bin/env bash
# Tensor parallelism on this machine: the default model's training step at tp = 2 (two processes,
# one thread each), without and with sequence parallelism, against tp = 1 (one process, one
# thread), alternating runs, and the planner's prediction of the same ratios for a cluster of this machine's cores as two one-thread devices.
#
#   bench/tensor_parallel.sh
#   ROUNDS=5 STEPS=30 bench/tensor_parallel.sh
#
# Environment: TESSERA (the binary, default build/release/src/cli/tessera), DATA (default
# data/kjv, prepared if missing), OUT (run folders, default build/bench/tensor_parallel), ROUNDS
# (default 3), STEPS (per run, default 20; the first 5 are warm-up and not timed).
#
# Prints per round each layout's median step time, then
#   RESULT tensor tp=2 step_ratio=<tp2 / tp1 median step> predicted_ratio=<the planner's>
#   RESULT tensor tp=2 sp=true step_ratio=<tp2 with sequence parallelism / tp1> predicted_ratio=<…>
# with the medians over rounds. A ratio above 1 means tp = 2 is slower: on two cores the step's
# matmuls shrink by half per rank while the all-reduces (4 per block per microbatch) are added.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TESSERA="${TESSERA:-$ROOT/build/release/src/cli/tessera}"
DATA="${DATA:-$ROOT/data/kjv}"
OUT="${OUT:-$ROOT/build/bench/tensor_parallel}"
ROUNDS="${ROUNDS:-3}"
STEPS="${STEPS:-20}"
WARMUP=5

if [[ ! -x $TESSERA ]]; then
  echo "no tessera binary at $TESSERA: build it first (cmake --preset release -G Ninja && cmake --build --preset release)" >&2
  exit 2
fi
if [[ ! -f $DATA/data.json ]]; then
  echo "== preparing the King James Bible in $DATA"
  "$TESSERA" data prepare --input kjv --out "$DATA" --vocab-size 4096
fi
(( STEPS > WARMUP )) || { echo "STEPS must exceed the $WARMUP warm-up steps" >&2; exit 2; }
echo "== $(date -u '+%Y-%m-%d %H:%M UTC'), $(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc) cores, /proc/loadavg: $(cat /proc/loadavg)"
mkdir -p "$OUT"
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1  # one thread per rank

COMMON=(--config "$ROOT/configs/default.toml" --data.dir "$DATA" --train.overwrite true --train.steps "$STEPS"
        --train.eval_every 0 --checkpoint.every 0 --train.sample_tokens 0 --log.progress plain --log.every 1)
# The median step time of a run's timed steps.
median_step() {
  grep '"kind":"train"' "$1/metrics.jsonl" | tail -n +$((WARMUP + 1)) |
    sed -E 's/.*"step_seconds":([-0-9.eE+]+).*/\1/' | sort -g |
    awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

# Layouts: tp 1, tp 2, and tp 2 with sequence parallelism.
ratios=()
sp_ratios=()
for ((r = 0; r < ROUNDS; r++)); do
  # Rotate which layout runs first, so a drift in machine load favours none.
  layouts=(1 2 2sp)
  order=("${layouts[@]:r % 3}" "${layouts[@]:0:r % 3}")
  declare -A step=()
  for layout in "${order[@]}"; do
    dir="$OUT/tp$layout"
    case $layout in
      1) "$TESSERA" train "${COMMON[@]}" --train.out_dir "$dir" > "$dir.log" 2>&1 || { cat "$dir.log"; exit 1; } ;;
      2) "$TESSERA" launch -n 2 -- train "${COMMON[@]}" --train.out_dir "$dir" --parallel.tp 2 > "$dir.log" 2>&1 ||
           { cat "$dir.log"; exit 1; } ;;
      2sp) "$TESSERA" launch -n 2 -- train "${COMMON[@]}" --train.out_dir "$dir" --parallel.tp 2 --parallel.sp true \
             > "$dir.log" 2>&1 || { cat "$dir.log"; exit 1; } ;;
    esac
    step[$layout]=$(median_step "$dir")
  done
  ratio=$(awk -v a="${step[2]}" -v b="${step[1]}" 'BEGIN { printf "%.3f", a / b }')
  sp_ratio=$(awk -v a="${step[2sp]}" -v b="${step[1]}" 'BEGIN { printf "%.3f", a / b }')
  ratios+=("$ratio")
  sp_ratios+=("$sp_ratio")
  echo "   round $r: tp 1 median step ${step[1]} s, tp 2 ${step[2]} s (ratio $ratio), tp 2 + sp ${step[2sp]} s (ratio $sp_ratio)"
done
middle() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
step_ratio=$(middle "${ratios[@]}")
sp_step_ratio=$(middle "${sp_ratios[@]}")

# The planner: this machine's two cores as two devices of one thread each (half the measured
# 2-thread sgemm ceiling and memory bandwidth each), linked by shared memory.
cluster=$(mktemp --suffix=.toml)
model=$(mktemp --suffix=.toml)
trap 'rm -f "$cluster" "$model"' EXIT
sed -e 's/^devices_per_node = 1/devices_per_node = 2/' -e 's/^name = "cpu-2core"/name = "cpu-2core-1thread"/' \
    -e 's/^peak_tflops_fp32 = 0.185 /peak_tflops_fp32 = 0.0925/' -e 's/^peak_tflops_bf16 = 0.185 /peak_tflops_bf16 = 0.0925/' \
    -e 's/^memory_bandwidth_gbps = 45.0/memory_bandwidth_gbps = 22.5/' "$ROOT/configs/clusters/cpu-2core.toml" > "$cluster"
vocab=$(sed -nE 's/.*"vocab_size": *([0-9]+).*/\1/p' "$DATA/data.json" | head -n 1)
{ echo "[model]"; sed -n '/^\[model\]/,/^\[/p' "$ROOT/configs/default.toml" | grep -E '^[a-z_]+ *=' ; echo "vocab_size = $vocab"; } > "$model"
batch=$(sed -nE 's/^batch_size *= *([0-9]+).*/\1/p' "$ROOT/configs/default.toml" | head -n 1)
micro=$(sed -nE 's/^micro_batch_size *= *([0-9]+).*/\1/p' "$ROOT/configs/default.toml" | head -n 1)
micro=${micro:-$batch}
plan_step() {
  "$TESSERA" plan --model "$model" --cluster "$cluster" --devices "$1" --global-batch "$batch" --precision fp32 \
    --layout "tp=$1,mb=$micro${2:-}" | awk '$1 == "step" { print $2 }'
}
predicted=$(awk -v a="$(plan_step 2)" -v b="$(plan_step 1)" 'BEGIN { printf "%.3f", a / b }')
echo "== /proc/loadavg at the end: $(cat /proc/loadavg)"
sp_predicted=$(awk -v a="$(plan_step 2 ,sp=true)" -v b="$(plan_step 1)" 'BEGIN { printf "%.3f", a / b }')
echo "RESULT tensor tp=2 step_ratio=$step_ratio predicted_ratio=$predicted"
echo "RESULT tensor tp=2 sp=true step_ratio=$sp_step_ratio predicted_ratio=$sp_predicted"
