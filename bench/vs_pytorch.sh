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
# Prints the sgemm ceiling, a table, and last one line per config:
#   RESULT <config> ratio=<tessera tok/s / pytorch tok/s> mfu=<tessera model FLOP/s / sgemm ceiling>
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
  out=$("$SGEMM" --threads "$THREADS")
  echo "$out"
  echo "$out" | tail -n 1 >>"$RESULTS"
}
echo "== sgemm ceiling"
measure_ceiling

# Keeps the JSON line (the last one) of a run, tagged with the config and the run index.
record() {
  local config=$1 run=$2 line
  line=$(tail -n 1)
  echo "$line" | $PYTHON -c "import json,sys; d=json.loads(sys.stdin.read()); d.update(config='$config', run=$run); print(json.dumps(d))" >>"$RESULTS"
  echo "$line" | $PYTHON -c "import json,sys; d=json.loads(sys.stdin.read()); print(f\"   {d['impl']:8s} {d['tokens_per_s']:10.1f} tok/s  {d['ms_per_step']:10.1f} ms/step\")"
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
echo "== sgemm ceiling again"
measure_ceiling
echo "== load average at the end $(cut -d' ' -f1-3 /proc/loadavg); every run in $RESULTS"

$PYTHON - "$RESULTS" "${CONFIG_LIST[@]}" <<'EOF'
import json, statistics, sys

path, configs = sys.argv[1], sys.argv[2:]
rows = [json.loads(line) for line in open(path) if line.strip()]
ceilings = [r for r in rows if r.get("bench") == "sgemm_ceiling"]
ceiling = max(ceilings, key=lambda r: r["gflops"])
peak = ceiling["gflops"] * 1e9
measured = ", ".join(f"{r['gflops']:.1f}" for r in ceilings)
print(f"\nsgemm ceiling: {ceiling['gflops']:.1f} GFLOP/s ({ceiling['threads']} threads, n = 1024..2048, best of "
      f"{ceiling['reps']}; the higher of the measurements {measured})")
print("model FLOPs per token = 6*N + 12*L*C*T (N = parameter count, tied embeddings, with position embeddings)\n")
print(f"{'config':10s} {'impl':8s} {'runs':>4s} {'N':>11s} {'FLOP/token':>11s} {'tok/s':>9s} {'ms/step':>9s} "
      f"{'fwd/bwd/opt %':>14s} {'MFU':>6s}")
results = []
for config in configs:
    med = {}
    for impl in ("tessera", "pytorch"):
        runs = [r for r in rows if r.get("config") == config and r.get("impl") == impl]
        if not runs:
            sys.exit(f"no {impl} runs recorded for {config}")
        r0 = runs[0]
        n = r0["params"]
        flops = 6 * n + 12 * r0["L"] * r0["C"] * r0["T"]
        tok = statistics.median(r["tokens_per_s"] for r in runs)
        ms = statistics.median(r["ms_per_step"] for r in runs)
        shares = "/".join(f"{100 * statistics.median(r[k] for r in runs):.0f}"
                          for k in ("forward_share", "backward_share", "optimizer_share"))
        mfu = tok * flops / peak
        med[impl] = (tok, mfu, n)
        print(f"{config:10s} {impl:8s} {len(runs):4d} {n:11d} {flops / 1e6:10.1f}M {tok:9.1f} {ms:9.1f} {shares:>14s} {mfu:6.3f}")
    if med["tessera"][2] != med["pytorch"][2]:
        sys.exit(f"{config}: parameter counts differ (tessera {med['tessera'][2]}, pytorch {med['pytorch'][2]}): "
                 "the two models are not the same")
    results.append((config, med["tessera"][0] / med["pytorch"][0], med["tessera"][1]))
print()
for config, ratio, mfu in results:
    print(f"RESULT {config} ratio={ratio:.3f} mfu={mfu:.3f}")
EOF
