#!/usr/bin/env bash
# Mixed precision's speed: tessera's training step in fp32 and in bf16 (precision.compute), side
# by side with PyTorch's CPU bf16 autocast on the same model and thread count, runs alternating
# (each a fresh process) and medians compared, because these machines are noisy.
#
#   bench/precision.sh                      # both configs, 3 runs each
#   RUNS=5 CONFIGS=tiny bench/precision.sh
#
# Environment: RUNS (runs per contender and config, default 3), CONFIGS (default "tiny gpt2-124M"),
# BUILD_DIR (default build/bench), RESULTS (JSON lines of every run, default $BUILD_DIR/precision.jsonl),
# PYTORCH_RUNS and PYTORCH_STEPS (PyTorch's runs, default RUNS, and its timed steps after no
# warm-up, default the config's): where the CPU has no bf16 dot products PyTorch's bf16 autocast
# is emulated, minutes per step at the 124M shape, and fewer of its runs and steps keep the script
# within an hour (the medians are then over fewer samples; the table says how many).
#
# Whether bf16 can be faster depends on the CPU: with bf16 dot products (avx512_bf16) oneDNN's bf16
# GEMM does twice the multiply-adds of an f32 one per instruction; without them tessera widens the
# 16-bit inputs to f32 and multiplies with sgemm (the same results at fp32 speed, plus the casts),
# and PyTorch emulates. The script prints which this CPU has and which GEMM tessera ran.
#
# The peer gets its best configuration on this machine: tessera's thread count, and the fastest
# OpenBLAS core the CPU's flags allow (bench/peer_best.sh; its fp32 products run there, its bf16
# autocast products on oneDNN). Every contender's GEMM library, OpenBLAS core and matmul rate at the
# model's main product (B*T x 4C x C, in the precision it runs) are printed. The bf16 ceiling is the
# machine's best measured bf16 matmul (bench/sgemm_ceiling.cpp on square sizes and the model's main
# product, before and after the runs, and each contender's own); the fp32 one its best sgemm. The
# rules (bench/fairness.py): no vs_pytorch_bf16 when PyTorch's bf16 matmul ran below half of the
# machine's best at the same shape, no MFU above 1; a line says why where they refuse.
#
# Prints a table and, last, one line per config (bench/fair_summary.py):
#   RESULT precision config=<c> bf16_speedup=<tessera bf16 tok/s / tessera fp32> vs_pytorch_bf16=<tessera bf16 / pytorch bf16>
#     mfu_bf16=<tessera bf16 model FLOP/s / bf16 ceiling> activation_ratio=<bf16 / fp32 activation peak>
#     peer_coretype=... peer_gemm_gflops_bf16=... tessera_gemm_gflops_bf16=... bf16_ceiling_gflops=...
#     bf16_best_at_shape_gflops=... threads=...
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="${BUILD_DIR:-$ROOT/build/bench}"
RUNS="${RUNS:-3}"
CONFIGS="${CONFIGS:-tiny gpt2-124M}"
RESULTS="${RESULTS:-$BUILD_DIR/precision.jsonl}"
PYTORCH_RUNS="${PYTORCH_RUNS:-$RUNS}"
PYTORCH_STEPS="${PYTORCH_STEPS:-}"
PYTHON=/usr/bin/python3
THREADS=2
export OMP_NUM_THREADS=$THREADS OPENBLAS_NUM_THREADS=$THREADS

# Model shape, batch and steps per config: "L C H T B V warmup steps" (as bench/vs_pytorch.sh).
config_args() {
  case "$1" in
    tiny) echo "4 256 4 128 8 256 2 10" ;;
    gpt2-124M) echo "12 768 12 256 4 50257 1 4" ;;
    *) echo "unknown config '$1' (known: tiny gpt2-124M)" >&2; exit 2 ;;
  esac
}
read -ra CONFIG_LIST <<<"$CONFIGS"
for c in "${CONFIG_LIST[@]}"; do config_args "$c" >/dev/null; done
if ! "$PYTHON" -c "import torch" 2>/dev/null; then
  echo "precision.sh needs $PYTHON with PyTorch (Debian package python3-torch)" >&2
  exit 2
fi

echo "== bench/precision.sh, $(date -u '+%Y-%m-%d %H:%M:%S UTC'), RUNS=$RUNS PYTORCH_RUNS=$PYTORCH_RUNS PYTORCH_STEPS=${PYTORCH_STEPS:-as the config} CONFIGS=\"$CONFIGS\""
echo "== building (Release) in $BUILD_DIR"
if [[ ! -f $BUILD_DIR/CMakeCache.txt ]]; then
  cmake -S "$ROOT" -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTESSERA_BUILD_BENCH=ON \
    -DTESSERA_BUILD_TESTS=OFF >/dev/null
fi
cmake --build "$BUILD_DIR" --target train_bench sgemm_ceiling >/dev/null
TRAIN_BENCH="$BUILD_DIR/bench/train_bench"
SGEMM="$BUILD_DIR/bench/sgemm_ceiling"

mkdir -p "$(dirname "$RESULTS")"
: >"$RESULTS"
if grep -qw avx512_bf16 /proc/cpuinfo; then bf16_cpu="has bf16 dot products (avx512_bf16)"; else bf16_cpu="has no bf16 dot products (no avx512_bf16)"; fi
echo "== $(date -u '+%Y-%m-%d %H:%M UTC'), $(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc) cores, $THREADS threads, load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "   CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'), $bf16_cpu"

# Keeps a run's JSON line (its last), tagged; prints tessera's `gemm:` start line and any warning
# of the first run.
record() {
  local config=$1 contender=$2 run=$3 out line
  out=$(cat)
  line=$(echo "$out" | tail -n 1)
  if ((run == 0)); then echo "$out" | grep -E '^(gemm:|warning:)' | sed "s/^/   $contender /" || true; fi
  echo "$line" | $PYTHON -c "import json,sys; d=json.loads(sys.stdin.read()); d.update(config='$config', contender='$contender', run=$run); print(json.dumps(d))" >>"$RESULTS"
  echo "$line" | $PYTHON -c "import json,sys; d=json.loads(sys.stdin.read()); print(f\"   {'$contender':16s} {d['tokens_per_s']:10.1f} tok/s  {d['ms_per_step']:10.1f} ms/step  matmul {d['gemm_gflops']:6.1f} GFLOP/s at {d['gemm_shape']} by {d['gemm_library']}, OpenBLAS core {d['openblas_core']}\")"
}

source "$ROOT/bench/peer_best.sh"
prepare_fair_peer

# The ceilings are what the machine can do at best: measured before and after the runs, the higher counts.
measure_ceiling() {
  local out
  out=$("$SGEMM" --threads "$THREADS" "${SHAPE_ARGS[@]}")
  echo "$out" | tail -n 2 | head -n 1 | sed 's/^/   /'
  echo "$out" | tail -n 1 >>"$RESULTS"
}
echo "== GEMM ceilings (OpenBLAS with OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-unset}, oneDNN, the bf16 matmul)"
measure_ceiling

contenders=(tessera-fp32 tessera-bf16 pytorch-bf16)
for config in "${CONFIG_LIST[@]}"; do
  read -r L C H T B V W S <<<"$(config_args "$config")"
  args=(--layers "$L" --embd "$C" --heads "$H" --seq "$T" --batch "$B" --vocab "$V" --warmup "$W" --steps "$S" --threads "$THREADS")
  echo "== $config: L=$L C=$C H=$H T=$T B=$B V=$V, $W warmup + $S timed steps, $RUNS runs each, alternating"
  for ((r = 0; r < RUNS; r++)); do
    # Rotate who goes first, so a drift in machine load favours none.
    order=("${contenders[@]:r % 3}" "${contenders[@]:0:r % 3}")
    for contender in "${order[@]}"; do
      case $contender in
        tessera-fp32) "$TRAIN_BENCH" "${args[@]}" --precision fp32 | record "$config" "$contender" "$r" ;;
        tessera-bf16) "$TRAIN_BENCH" "${args[@]}" --precision bf16 | record "$config" "$contender" "$r" ;;
        pytorch-bf16)
          ((r < PYTORCH_RUNS)) || continue
          torch_args=("${args[@]}")
          [[ -n $PYTORCH_STEPS ]] && torch_args+=(--warmup 0 --steps "$PYTORCH_STEPS")
          $PYTHON "$ROOT/bench/torch_train.py" "${torch_args[@]}" --autocast bf16 | record "$config" "$contender" "$r" ;;
      esac
    done
  done
done
echo "== GEMM ceilings again"
measure_ceiling
echo "== load average at the end $(cut -d' ' -f1-3 /proc/loadavg); every run in $RESULTS"

$PYTHON "$ROOT/bench/fair_summary.py" precision "$RESULTS" --threads "$THREADS" --peer-coretype "${PEER_CORETYPE:-unset}" \
  "${CONFIG_LIST[@]}"
