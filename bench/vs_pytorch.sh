#!/usr/bin/env bash
# tessera vs PyTorch: GPT-2 style training throughput, side by side in one run, on the same
# machine and thread count (fp32, AdamW, 2 threads). Runs alternate between the two (each run a
# fresh process) and the medians are compared, because these machines are noisy.
#
#   bench/vs_pytorch.sh                     # both configs, 3 runs each
#   RUNS=5 CONFIGS=tiny bench/vs_pytorch.sh
#
# Environment: RUNS (runs per implementation and config, default 3), CONFIGS (default
# "tiny gpt2-124M"), BUILD_DIR (default build/bench), RESULTS (JSON lines of every run, default
# $BUILD_DIR/vs_pytorch.jsonl).
#
# The peer gets its best configuration on this machine: its thread count is tessera's, and its
# OpenBLAS core is the fastest of those the CPU's flags allow, measured first (bench/peer_best.sh;
# an OPENBLAS_CORETYPE in the environment is one of the candidates, not a given). Every contender's
# GEMM library, OpenBLAS core and matmul rate at the model's main product (B*T x 4C x C) are printed.
#
# The fp32 ceiling is the machine's best measured sgemm: OpenBLAS (with the chosen core) and oneDNN
# on square sizes and the model's main product (bench/sgemm_ceiling.cpp, before and after the runs),
# and each contender's own matmul at that product. The rules (bench/fairness.py): no ratio when
# PyTorch's fp32 matmul ran below half of the machine's best at the same shape (a line says why
# instead), and no MFU above 1 (that would mean the ceiling was wrong; a line says so).
#
# Prints the ceiling, a table, and last one line per config (bench/fair_summary.py):
#   RESULT <config> ratio=<tessera tok/s / pytorch tok/s> mfu=<tessera model FLOP/s / fp32 ceiling>
#     peer_coretype=<OPENBLAS_CORETYPE given to PyTorch> peer_core=<its OpenBLAS core>
#     peer_gemm_gflops=<PyTorch's fp32 matmul> tessera_gemm_gflops=<tessera's> ceiling_gflops=<fp32 ceiling>
#     best_at_shape_gflops=<the machine's best at the model's main product> threads=<each side's>
# (ratio or mfu left out, after a "no ...:" line saying why, where the rules refuse them).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="${BUILD_DIR:-$ROOT/build/bench}"
RUNS="${RUNS:-3}"
CONFIGS="${CONFIGS:-tiny gpt2-124M}"
RESULTS="${RESULTS:-$BUILD_DIR/vs_pytorch.jsonl}"
PYTHON=/usr/bin/python3
THREADS=2
export OMP_NUM_THREADS=$THREADS OPENBLAS_NUM_THREADS=$THREADS

# Model shape, batch and steps per config: "L C H T B V warmup steps".
config_args() {
  case "$1" in
    tiny) echo "4 256 4 128 8 256 2 10" ;;
    # The 124M shape costs seconds per step on two cores: one warmup step and four timed ones.
    gpt2-124M) echo "12 768 12 256 4 50257 1 4" ;;
    *) echo "unknown config '$1' (known: tiny gpt2-124M)" >&2; exit 2 ;;
  esac
}
read -ra CONFIG_LIST <<<"$CONFIGS"
for c in "${CONFIG_LIST[@]}"; do config_args "$c" >/dev/null; done
if ! "$PYTHON" -c "import torch" 2>/dev/null; then
  echo "vs_pytorch.sh needs $PYTHON with PyTorch (Debian package python3-torch)" >&2
  exit 2
fi

echo "== bench/vs_pytorch.sh, $(date -u '+%Y-%m-%d %H:%M:%S UTC'), RUNS=$RUNS CONFIGS=\"$CONFIGS\""
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
echo "== $(date -u '+%Y-%m-%d %H:%M UTC'), $(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc) cores, $THREADS threads, load average $(cut -d' ' -f1-3 /proc/loadavg)"
# Busy: other runnable processes in most of ten samples over a second (the sampler counts itself).
if $PYTHON -c "
import statistics, sys, time
runnable = []
for _ in range(10):
    runnable.append(int(open('/proc/loadavg').read().split()[3].split('/')[0]) - 1)
    time.sleep(0.1)
sys.exit(statistics.median(runnable) < 1)"; then
  echo "   warning: the machine is busy; other processes competing for the cores make both sides slower and noisier"
fi

# The ceiling is what the machine can do at best: measured before and after the runs, the higher counts.
measure_ceiling() {
  local out
  out=$("$SGEMM" --threads "$THREADS" "${SHAPE_ARGS[@]}")
  echo "$out"
  echo "$out" | tail -n 1 >>"$RESULTS"
}
source "$ROOT/bench/peer_best.sh"
prepare_fair_peer

echo "== GEMM ceiling (OpenBLAS with OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-unset}, oneDNN)"
measure_ceiling

# Keeps the JSON line (the last one) of a run, tagged with the config and the run index; prints
# tessera's `gemm:` start line and any warning of the first run.
record() {
  local config=$1 run=$2 out line
  out=$(cat)
  line=$(echo "$out" | tail -n 1)
  if ((run == 0)); then echo "$out" | grep -E '^(gemm:|warning:)' | sed 's/^/   tessera /' || true; fi
  echo "$line" | $PYTHON -c "import json,sys; d=json.loads(sys.stdin.read()); d.update(config='$config', run=$run); print(json.dumps(d))" >>"$RESULTS"
  echo "$line" | $PYTHON -c "import json,sys; d=json.loads(sys.stdin.read()); print(f\"   {d['impl']:8s} {d['tokens_per_s']:10.1f} tok/s  {d['ms_per_step']:10.1f} ms/step  matmul {d['gemm_gflops']:6.1f} GFLOP/s at {d['gemm_shape']} by {d['gemm_library']}, OpenBLAS core {d['openblas_core']}\")"
}

for config in "${CONFIG_LIST[@]}"; do
  read -r L C H T B V W S <<<"$(config_args "$config")"
  args=(--layers "$L" --embd "$C" --heads "$H" --seq "$T" --batch "$B" --vocab "$V" --warmup "$W" --steps "$S" --threads "$THREADS")
  echo "== $config: L=$L C=$C H=$H T=$T B=$B V=$V, $W warmup + $S timed steps, $RUNS runs each, alternating"
  for ((r = 0; r < RUNS; r++)); do
    # Alternate which goes first, so a drift in machine load does not favour one side.
    if ((r % 2 == 0)); then order=(tessera pytorch); else order=(pytorch tessera); fi
    for impl in "${order[@]}"; do
      if [[ $impl == tessera ]]; then
        "$TRAIN_BENCH" "${args[@]}" | record "$config" "$r"
      else
        $PYTHON "$ROOT/bench/torch_train.py" "${args[@]}" | record "$config" "$r"
      fi
    done
  done
done
echo "== GEMM ceiling again"
measure_ceiling
echo "== load average at the end $(cut -d' ' -f1-3 /proc/loadavg); every run in $RESULTS"

$PYTHON "$ROOT/bench/fair_summary.py" vs_pytorch "$RESULTS" --threads "$THREADS" --peer-coretype "${PEER_CORETYPE:-unset}" \
  "${CONFIG_LIST[@]}"
