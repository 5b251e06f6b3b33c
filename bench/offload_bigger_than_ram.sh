#!/usr/bin/env bash
# Bigger than RAM: a Llama-shaped model whose fp32 AdamW states (16 bytes a parameter: values,
# gradients and two moments) are at least twice this machine's RAM trains a few steps with its
# parameters (ZeRO-3's shard, the whole model in one process) and its optimizer state in the nvme
# tier (memory.offload_params = memory.offload_optimizer = "nvme"), under memory.ram_budget_mb.
# The machine is measured first (`tessera plan --calibrate-here` on the offload folder's disk) and
# the planner predicts the run's step on it; the measured step is compared with that prediction.
#
#   bench/offload_bigger_than_ram.sh
#   OFFLOAD_DIR=/mnt/nvme RAM_BUDGET_MB=12000 bench/offload_bigger_than_ram.sh
#
# Environment: OFFLOAD_DIR (the nvme tier's folder, default $BUILD_DIR/offload-big), BUILD_DIR
# (default build/release), DATA (default data/kjv, prepared when missing), STEPS (default 3),
# N_LAYER (default 32: 3.25B parameters at N_EMBD 3072 and FFN 8192; the script refuses a shape
# whose states are under twice the RAM), N_EMBD, FFN, RAM_BUDGET_MB (default 16384),
# FINAL_CHECKPOINT (default 0; 1 writes the run's checkpoint at its end, then removes it).
#
# The run writes 16 bytes a parameter to the nvme tier (values, gradients, both moments): 52 GB for
# the default shape. With FINAL_CHECKPOINT=1, a checkpoint of 12 bytes a parameter (values and
# moments) beside it at the end, 91 GB in all. The script checks the free space first and stops,
# naming both numbers, where the disk has less.
#
# Prints the run's progress and, last:
#   RESULT offload model_params=<n> states_gib=<16 n / 2^30> ram_gib=<MemTotal> peak_rss_gib=<VmHWM>
#          step_seconds=<median of the steps after the first> predicted_step_seconds=<plan --config>
#          disk_read_gbps=<measured> loss_first=<l1> loss_last=<ln>
# and exits 1 when the states are under twice the RAM, the resident set went above the budget, the
# loss is not finite or did not fall, or the step is more than 25 % off the prediction.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="${BUILD_DIR:-$ROOT/build/release}"
STEPS="${STEPS:-3}"
N_LAYER="${N_LAYER:-32}"
N_EMBD="${N_EMBD:-3072}"
FFN="${FFN:-8192}"
RAM_BUDGET_MB="${RAM_BUDGET_MB:-16384}"
FINAL_CHECKPOINT="${FINAL_CHECKPOINT:-0}"
DATA="${DATA:-$ROOT/data/kjv}"
OFFLOAD_DIR="${OFFLOAD_DIR:-$BUILD_DIR/offload-big}"
PYTHON=/usr/bin/python3
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-$(nproc)}"

cmake --build "$BUILD_DIR" --target tessera >/dev/null
TESSERA="$BUILD_DIR/src/cli/tessera"
[[ -f $DATA/data.json ]] || "$TESSERA" data prepare --input kjv --out "$DATA" --vocab-size 4096 >/dev/null
mkdir -p "$OFFLOAD_DIR"
OUT="$BUILD_DIR/offload-big-run"
rm -rf "$OUT"
mkdir -p "$OUT"

echo "== $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores, $OMP_NUM_THREADS threads, /proc/loadavg: $(cat /proc/loadavg)"
# 24 query heads of 128 sharing 8 key/value heads, as Llama 3.2 3B; 2 sequences of 64 tokens a
# step. The learning rate is a fine-tuning one, with one warm-up step: Adam's first steps move every
# weight by about the rate, which at 1e-4 already sends this 32-layer stack's loss up at step 3.
cat >"$OUT/run.toml" <<EOF
[model]
arch = "llama"
n_layer = $N_LAYER
n_head = $((N_EMBD / 128))
n_kv_head = $((N_EMBD / 384))
n_embd = $N_EMBD
ffn_hidden = $FFN
seq_len = 64
tied_embeddings = false

[data]
dir = "$DATA"

[train]
steps = $STEPS
batch_size = 2
micro_batch_size = 2
out_dir = "$OUT/run"
eval_every = 0
eval_batches = 1
sample_tokens = 0

[optim]
lr = 1e-5
min_lr = 1e-6
warmup_steps = 1

[parallel]
zero_stage = 3

[memory]
offload_params = "nvme"
offload_optimizer = "nvme"
offload_dir = "$OFFLOAD_DIR"
ram_budget_mb = $RAM_BUDGET_MB

[checkpoint]
at_end = $([[ $FINAL_CHECKPOINT == 1 ]] && echo true || echo false)

[log]
every = 1
progress = "plain"
EOF

"$TESSERA" plan --calibrate-here --out "$OUT/cluster-here.toml" --offload-dir "$OFFLOAD_DIR" | grep -E "disk:|^peak|^wrote"
"$TESSERA" plan --config "$OUT/run.toml" --cluster "$OUT/cluster-here.toml" | tail -24
"$TESSERA" plan --config "$OUT/run.toml" --cluster "$OUT/cluster-here.toml" --json >"$OUT/plan.json"
# The nvme tier holds 16 bytes a parameter; the final checkpoint, when asked for, 12 of them again.
nvme_bytes="$($PYTHON -c "import json, sys; print(int(json.load(open(sys.argv[1]))['memory']['nvme']))" "$OUT/plan.json")"
checkpoint_bytes=0
[[ $FINAL_CHECKPOINT == 1 ]] && checkpoint_bytes=$((nvme_bytes / 16 * 12))
if [[ "$(df --output=source "$OFFLOAD_DIR" | tail -1)" == "$(df --output=source "$OUT" | tail -1)" ]]; then
  need=$((nvme_bytes + checkpoint_bytes))
  free="$(df --output=avail -B1 "$OFFLOAD_DIR" | tail -1)"
  where="$OFFLOAD_DIR and $OUT (one disk)"
else
  need=$nvme_bytes
  free="$(df --output=avail -B1 "$OFFLOAD_DIR" | tail -1)"
  where="$OFFLOAD_DIR"
  out_free="$(df --output=avail -B1 "$OUT" | tail -1)"
  if (( out_free < checkpoint_bytes )); then
    echo "the final checkpoint needs about $((checkpoint_bytes / 1000000000)) GB in $OUT, which has $((out_free / 1000000000)) GB free" >&2
    exit 1
  fi
fi
if (( free < need )); then
  echo "the run needs about $((need / 1000000000)) GB in $where (the nvme tier$( ((checkpoint_bytes > 0)) && echo ", then its final checkpoint beside it")), which has $((free / 1000000000)) GB free: give OFFLOAD_DIR (and BUILD_DIR) a disk with that room" >&2
  exit 1
fi
# What the disk under the offload folder moved while the run trained (/proc/diskstats, 512-byte
# sectors): beside the copy engine's own counts (metrics.jsonl), what reached the device.
DEVICE="$(basename "$(df --output=source "$OFFLOAD_DIR" | tail -1)")"
sectors() { awk -v d="$DEVICE" '$3 == d { print $6, $10 }' /proc/diskstats; }
status=0
before="$(sectors)"
"$TESSERA" train --config "$OUT/run.toml" 2>&1 | tee "$OUT/train.log" || status=$?
after="$(sectors)"
[[ -n $before && -n $after ]] && echo "disk $DEVICE during the run: $(awk -v b="$before" -v a="$after" 'BEGIN {
  split(b, x, " "); split(a, y, " "); printf "%.1f GB read, %.1f GB written", (y[1] - x[1]) * 512 / 1e9, (y[2] - x[2]) * 512 / 1e9 }')"
# A final checkpoint is nearly as large as the nvme tier: give the disk back, keep the metrics.
rm -rf "$OUT/run/checkpoints"
if (( status != 0 )); then
  echo "the run failed (exit $status): $OUT/train.log" >&2
  exit 1
fi

$PYTHON - "$OUT" "$RAM_BUDGET_MB" <<'EOF'
import json, math, re, statistics, sys
out, budget_mb = sys.argv[1], float(sys.argv[2])
lines = [json.loads(l) for l in open(f"{out}/run/metrics.jsonl")]
train = [l for l in lines if l["kind"] == "train"]
plan = json.load(open(f"{out}/plan.json"))
disk = re.search(r"read_gbps\s*=\s*([0-9.eE+-]+)", open(f"{out}/cluster-here.toml").read())
params = int(re.search(r"model: (\d+) parameters", open(f"{out}/train.log").read()).group(1))
ram = next(int(l.split()[1]) * 1024 for l in open("/proc/meminfo") if l.startswith("MemTotal:"))
states = 16 * params
peak_rss = max(l["memory"]["rss_peak"] for l in train)
step = statistics.median(l["step_seconds"] for l in train[1:]) if len(train) > 1 else train[0]["step_seconds"]
predicted = plan["step_seconds"]
losses = [l["loss"] for l in train]
print(f"RESULT offload model_params={params} states_gib={states / 2**30:.2f} ram_gib={ram / 2**30:.2f} "
      f"peak_rss_gib={peak_rss / 2**30:.2f} step_seconds={step:.2f} predicted_step_seconds={predicted:.2f} "
      f"disk_read_gbps={float(disk.group(1)) if disk else float('nan'):.2f} loss_first={losses[0]:.4f} "
      f"loss_last={losses[-1]:.4f}")
problems = []
if states < 2 * ram:
    problems.append(f"the states ({states / 2**30:.1f} GiB) are under twice the RAM ({ram / 2**30:.1f} GiB)")
if peak_rss > budget_mb * 2**20:
    problems.append(f"the resident set reached {peak_rss / 2**20:.0f} MiB, over memory.ram_budget_mb = {budget_mb:.0f}")
if not all(math.isfinite(x) for x in losses) or losses[-1] >= losses[0]:
    problems.append(f"the loss did not fall: {losses}")
if abs(step / predicted - 1) > 0.25:
    problems.append(f"the step ({step:.1f} s) is more than 25 % off the prediction ({predicted:.1f} s)")
for p in problems:
    print("FAIL:", p)
sys.exit(1 if problems else 0)
EOF
