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
# Prints a table and, last, one line per config:
#   RESULT precision config=<c> bf16_speedup=<tessera bf16 tok/s / tessera fp32> vs_pytorch_bf16=<tessera bf16 / pytorch bf16> activation_ratio=<bf16 / fp32 activation peak>
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

echo "== building (Release) in $BUILD_DIR"
if [[ ! -f $BUILD_DIR/CMakeCache.txt ]]; then
  cmake -S "$ROOT" -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTESSERA_BUILD_BENCH=ON \
    -DTESSERA_BUILD_TESTS=OFF >/dev/null
fi
cmake --build "$BUILD_DIR" --target train_bench >/dev/null
TRAIN_BENCH="$BUILD_DIR/bench/train_bench"

mkdir -p "$(dirname "$RESULTS")"
: >"$RESULTS"
if grep -qw avx512_bf16 /proc/cpuinfo; then bf16_cpu="has bf16 dot products (avx512_bf16)"; else bf16_cpu="has no bf16 dot products (no avx512_bf16)"; fi
echo "== $(date -u '+%Y-%m-%d %H:%M UTC'), $(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc) cores, $THREADS threads, load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "   CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'), $bf16_cpu"

record() {
  local config=$1 contender=$2 run=$3 line
  line=$(tail -n 1)
  echo "$line" | $PYTHON -c "import json,sys; d=json.loads(sys.stdin.read()); d.update(config='$config', contender='$contender', run=$run); print(json.dumps(d))" >>"$RESULTS"
  echo "$line" | $PYTHON -c "import json,sys; d=json.loads(sys.stdin.read()); print(f\"   {'$contender':16s} {d['tokens_per_s']:10.1f} tok/s  {d['ms_per_step']:10.1f} ms/step  {d.get('gemm', '')}\")"
}

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
echo "== load average at the end $(cut -d' ' -f1-3 /proc/loadavg); every run in $RESULTS"

$PYTHON - "$RESULTS" "${CONFIG_LIST[@]}" <<'EOF'
import json, statistics, sys

path, configs = sys.argv[1], sys.argv[2:]
rows = [json.loads(line) for line in open(path) if line.strip()]
print(f"\n{'config':10s} {'contender':14s} {'runs':>4s} {'tok/s':>9s} {'ms/step':>9s} {'activations MiB':>16s}")
results = []
for config in configs:
    med = {}
    for contender in ("tessera-fp32", "tessera-bf16", "pytorch-bf16"):
        runs = [r for r in rows if r.get("config") == config and r.get("contender") == contender]
        if not runs:
            sys.exit(f"no {contender} runs recorded for {config}")
        tok = statistics.median(r["tokens_per_s"] for r in runs)
        ms = statistics.median(r["ms_per_step"] for r in runs)
        act = runs[0].get("activation_peak_mib")
        med[contender] = (tok, act)
        act_text = f"{act:16.1f}" if act is not None else f"{'-':>16s}"
        print(f"{config:10s} {contender:14s} {len(runs):4d} {tok:9.1f} {ms:9.1f} {act_text}")
    results.append((config, med["tessera-bf16"][0] / med["tessera-fp32"][0], med["tessera-bf16"][0] / med["pytorch-bf16"][0],
                    med["tessera-bf16"][1] / med["tessera-fp32"][1]))
print()
for config, speedup, vs, act in results:
    print(f"RESULT precision config={config} bf16_speedup={speedup:.3f} vs_pytorch_bf16={vs:.3f} activation_ratio={act:.3f}")
EOF
