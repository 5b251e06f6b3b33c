#!/usr/bin/env bash
# Memory tiers: what offloading costs a step where everything would also fit in RAM. The GPT-2
# 124M shape trains in memory and with its kept activations and its optimizer state in the nvme
# tier (memory.offload_activations = memory.offload_optimizer = "nvme"), side by side: each round
# runs both, each in a fresh process, in an order that alternates from round to round, so a drift
# in machine load does not favour one; the medians over rounds of the median step time (after the
# warm-up steps) are compared.
#
#   bench/offload.sh
#   ROUNDS=5 STEPS=6 OFFLOAD_DIR=/mnt/nvme bench/offload.sh
#   DELAYED_AFTER=1 bench/offload.sh   # both runs with ZeRO-Offload's delayed update from step 1
#
# Environment: ROUNDS (default 3), STEPS (steps per run, default 5, the first WARMUP not timed),
# WARMUP (default 2), OFFLOAD_DIR (the nvme tier's folder, default $BUILD_DIR/offload-bench),
# BUILD_DIR (default build/release), DATA (default data/kjv, prepared when missing), DELAYED_AFTER
# (optim.delayed_update_after of both runs, default 0: synchronous updates; with it the offloaded
# state streams while the next step computes, as ZeRO-Offload runs it).
#
# Prints one line per run and, last:
#   RESULT offload_overhead config=gpt2-124M ratio=<offloaded ÷ in-memory median step> \
#          activation_ratio=<peaks> optimizer_ratio=<peaks> nvme_peak_mib=<offloaded run's> \
#          delayed_update_after=<DELAYED_AFTER>
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="${BUILD_DIR:-$ROOT/build/release}"
ROUNDS="${ROUNDS:-3}"
STEPS="${STEPS:-5}"
WARMUP="${WARMUP:-2}"
DELAYED_AFTER="${DELAYED_AFTER:-0}"
DATA="${DATA:-$ROOT/data/kjv}"
OFFLOAD_DIR="${OFFLOAD_DIR:-$BUILD_DIR/offload-bench}"
PYTHON=/usr/bin/python3
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-$(nproc)}"

if (( WARMUP >= STEPS )); then
  echo "WARMUP ($WARMUP) must be fewer than STEPS ($STEPS): the timed steps are the ones after it" >&2
  exit 2
fi
cmake --build "$BUILD_DIR" --target tessera >/dev/null
TESSERA="$BUILD_DIR/src/cli/tessera"
[[ -f $DATA/data.json ]] || "$TESSERA" data prepare --input kjv --out "$DATA" --vocab-size 4096 >/dev/null
mkdir -p "$OFFLOAD_DIR"
OUT="$BUILD_DIR/offload-bench-runs"
rm -rf "$OUT"
mkdir -p "$OUT"

# The GPT-2 124M shape (12 layers of 768, 12 heads, GPT-2's vocabulary), 4 sequences of 256 a step.
MODEL=(--model.arch gpt2 --model.n_layer 12 --model.n_embd 768 --model.n_head 12 --model.seq_len 256
       --model.vocab_size 50257 --data.dir "$DATA" --train.batch_size 4 --train.micro_batch_size 4
       --train.steps "$STEPS" --train.eval_every 0 --train.eval_batches 1 --train.sample_tokens 0
       --checkpoint.every 0 --log.every 1 --log.progress plain --optim.warmup_steps 1 --log.peak_gflops 1000
       --optim.delayed_update_after "$DELAYED_AFTER")
OFFLOADED=(--memory.offload_activations nvme --memory.offload_optimizer nvme --memory.offload_dir "$OFFLOAD_DIR")

echo "== $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores, $OMP_NUM_THREADS threads, /proc/loadavg: $(cat /proc/loadavg)"
run() {  # name round extra...
  local name=$1 round=$2
  shift 2
  local dir="$OUT/$name-$round"
  "$TESSERA" train "${MODEL[@]}" --train.out_dir "$dir" "$@" >"$dir.log" 2>&1 || {
    echo "the $name run of round $round failed:" >&2
    tail -5 "$dir.log" >&2
    exit 1
  }
  rm -rf "$dir/checkpoints"  # 1.4 GB a run, never read
  $PYTHON - "$dir/metrics.jsonl" "$WARMUP" "$name" "$round" <<'EOF'
import json, statistics, sys
lines = [json.loads(l) for l in open(sys.argv[1]) if '"kind":"train"' in l]
timed = [l["step_seconds"] for l in lines[int(sys.argv[2]):]]
m = lines[-1]["memory"]
print(f"{sys.argv[3]:>9} round {sys.argv[4]}: median step {statistics.median(timed):.3f} s, activations "
      f"{m['activations'] / 2**20:.1f} MiB, optimizer {m['optimizer'] / 2**20:.1f} MiB, nvme "
      f"{m.get('nvme', 0) / 2**20:.1f} MiB, rss {m['rss'] / 2**20:.0f} MiB")
EOF
}
for ((round = 1; round <= ROUNDS; ++round)); do
  if (( round % 2 )); then
    run in_memory "$round"
    run offloaded "$round" "${OFFLOADED[@]}"
  else
    run offloaded "$round" "${OFFLOADED[@]}"
    run in_memory "$round"
  fi
done

$PYTHON - "$OUT" "$ROUNDS" "$WARMUP" "$DELAYED_AFTER" <<'EOF'
import json, statistics, sys
out, rounds, warmup, delayed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
def runs(name):
    for r in range(1, rounds + 1):
        yield [json.loads(l) for l in open(f"{out}/{name}-{r}/metrics.jsonl") if '"kind":"train"' in l]
def median_step(name):
    return statistics.median(statistics.median(l["step_seconds"] for l in lines[warmup:]) for lines in runs(name))
def last_memory(name):
    return list(runs(name))[-1][-1]["memory"]
base, moved = median_step("in_memory"), median_step("offloaded")
a, b = last_memory("in_memory"), last_memory("offloaded")
print(f"RESULT offload_overhead config=gpt2-124M ratio={moved / base:.3f} "
      f"activation_ratio={b['activations'] / a['activations']:.3f} optimizer_ratio={b['optimizer'] / a['optimizer']:.3f} "
      f"nvme_peak_mib={b.get('nvme', 0) / 2**20:.1f} delayed_update_after={delayed}")
EOF
