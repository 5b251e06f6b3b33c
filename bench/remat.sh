#!/usr/bin/env bash
# Encoded activations on the default demo (configs/default.toml on the King James Bible) with the
# squared-ReLU MLP (model.activation = "relu2", sparse once training starts): the run without an
# encoding, with Gist's (memory.activation_encoding = "gist": sparse storage where it pays, bf16
# elsewhere) and with FP8 (E4M3, a scale per block of 128), from the same seed on the same batches.
# Compared:
#   activation_ratio  the activation peak (metrics.jsonl memory.activations, the allocator's peak of
#                     the step) over the run without encoding; it includes what no encoding touches
#                     (the running unit's tensors, the head's logits)
#   stash_ratio       what the encoder encoded, after over before (memory.encoded_activations)
#   val_loss_delta    (final validation loss - none's) / none's
#   step_ratio        the median step over none's, each run in a fresh process, the runs in an order
#                     that rotates from round to round so that a drift in machine load favours none
#
#   bench/remat.sh
#   ROUNDS=3 STEPS=300 bench/remat.sh
#
# Environment: TESSERA (default build/release/src/cli/tessera), DATA (default data/kjv, prepared if
# missing), OUT (run folders, default build/bench/remat), STEPS (default: the config's 600), ROUNDS
# (default 1; the losses are the first round's, the step ratio the median over rounds), ACTIVATION
# (default relu2).
#
# Prints, per encoding,
#   RESULT encoding name=<e> activation_ratio=<r> val_loss_delta=<d> step_ratio=<s> stash_ratio=<x>
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TESSERA="${TESSERA:-$ROOT/build/release/src/cli/tessera}"
DATA="${DATA:-$ROOT/data/kjv}"
OUT="${OUT:-$ROOT/build/bench/remat}"
STEPS="${STEPS:-600}"
ROUNDS="${ROUNDS:-1}"
ACTIVATION="${ACTIVATION:-relu2}"
PYTHON=/usr/bin/python3
ENCODINGS=(none gist fp8)

if [[ ! -x $TESSERA ]]; then
  echo "no tessera binary at $TESSERA: build it first (cmake --preset release -G Ninja && cmake --build --preset release)" >&2
  exit 2
fi
if [[ ! -f $DATA/data.json ]]; then
  echo "== preparing the King James Bible in $DATA"
  "$TESSERA" data prepare --input kjv --out "$DATA" --vocab-size 4096
fi
echo "== $(date -u '+%Y-%m-%d %H:%M UTC'), $(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc) cores, /proc/loadavg: $(cat /proc/loadavg)"
mkdir -p "$OUT"
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-$(nproc)}"

run() {  # encoding round
  local encoding=$1 round=$2
  local dir="$OUT/$encoding-$round"
  "$TESSERA" train --config "$ROOT/configs/default.toml" --data.dir "$DATA" --train.out_dir "$dir" \
    --train.overwrite true --train.sample_tokens 0 --log.progress plain --train.steps "$STEPS" \
    --train.eval_every "$STEPS" --checkpoint.every 0 --model.activation "$ACTIVATION" \
    --memory.activation_encoding "$encoding" >"$dir.log" 2>&1 || { tail -5 "$dir.log"; exit 1; }
  echo "$encoding round $round: $(grep -E 'val loss' "$dir.log" | tail -n 1)"
}
for ((round = 1; round <= ROUNDS; ++round)); do
  n=${#ENCODINGS[@]}
  for ((i = 0; i < n; ++i)); do run "${ENCODINGS[$(((i + round - 1) % n))]}" "$round"; done
done

$PYTHON - "$OUT" "$ROUNDS" "${ENCODINGS[@]}" <<'PY'
import json, statistics, sys
out, rounds, encodings = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
def lines(name, r):
    return [json.loads(l) for l in open(f"{out}/{name}-{r}/metrics.jsonl")]
def train(name, r):
    return [l for l in lines(name, r) if l["kind"] == "train"]
def median_step(name, r):
    return statistics.median(l["step_seconds"] for l in train(name, r)[2:])  # after two warm-up steps
def final_val(name):
    return [l["loss"] for l in lines(name, 1) if l["kind"] == "val"][-1]
def activation_peak(name):
    return max(l["memory"]["activations"] for l in train(name, 1))
def stash(name):
    e = [l["memory"].get("encoded_activations") for l in train(name, 1)]
    e = [x for x in e if x and x["from"] > 0]
    return statistics.median(x["to"] / x["from"] for x in e) if e else 1.0
step = {e: statistics.median(median_step(e, r) for r in range(1, rounds + 1)) for e in encodings}
for r in range(1, rounds + 1):
    print(f"round {r}: median step " + ", ".join(f"{e} {median_step(e, r):.4f} s" for e in encodings))
base_val, base_peak = final_val("none"), activation_peak("none")
for e in encodings[1:]:
    print(f"RESULT encoding name={e} activation_ratio={activation_peak(e) / base_peak:.3f} "
          f"val_loss_delta={(final_val(e) - base_val) / base_val:.4f} step_ratio={step[e] / step['none']:.3f} "
          f"stash_ratio={stash(e):.3f}")
PY
