#!/usr/bin/env bash
# ZeRO-Offload's delayed parameter update on the default demo (configs/default.toml on the King
# James Bible): the synchronous run and the run whose update is delayed after a tenth of its steps
# (optim.delayed_update_after), from the same seed on the same batches. Compared: the final
# validation losses (the bar: within 1 %), and the step time over the delayed steps — the median
# of each run's step_seconds after the start step, each run in a fresh process, the two run in an
# order that alternates from round to round so that a drift in machine load favours neither.
#
#   bench/delayed_update.sh
#   ROUNDS=2 STEPS=300 bench/delayed_update.sh
#   EXTRAPOLATE=1 bench/delayed_update.sh     # the delayed run on extrapolated weights
#   LR=1e-3 bench/delayed_update.sh           # both runs at another peak rate (min_lr a tenth of it)
#
# Environment: TESSERA (default build/release/src/cli/tessera), DATA (default data/kjv, prepared if
# missing), OUT (run folders, default build/bench/delayed_update), STEPS (default: the config's
# 600), ROUNDS (default 1; the losses are the first round's, the speedup the median over rounds),
# EXTRAPOLATE (default 0; 1: optim.delayed_update_extrapolate = true on the delayed run), LR
# (default: the config's 2e-3; optim.lr of both runs, optim.min_lr a tenth of it).
#
# Prints
#   RESULT delayed_update val_loss_delta=<(delayed - sync) / sync> speedup=<sync ÷ delayed median step> \
#          sync_step_seconds=<s> delayed_step_seconds=<s> update_wait_seconds=<median wait> \
#          extrapolated=<0|1> lr=<peak rate>
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TESSERA="${TESSERA:-$ROOT/build/release/src/cli/tessera}"
DATA="${DATA:-$ROOT/data/kjv}"
OUT="${OUT:-$ROOT/build/bench/delayed_update}"
STEPS="${STEPS:-600}"
ROUNDS="${ROUNDS:-1}"
PYTHON=/usr/bin/python3
START=$((STEPS / 10))
EXTRAPOLATE="${EXTRAPOLATE:-0}"
LR="${LR:-2e-3}"
RATE=(--optim.lr "$LR" --optim.min_lr "$($PYTHON -c "import sys; print(float(sys.argv[1]) / 10)" "$LR")")
DELAYED=(--optim.delayed_update_after "$START")
if [[ $EXTRAPOLATE == 1 ]]; then DELAYED+=(--optim.delayed_update_extrapolate true); fi

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

run() {  # name round extra...
  local name=$1 round=$2
  shift 2
  local dir="$OUT/$name-$round"
  "$TESSERA" train --config "$ROOT/configs/default.toml" --data.dir "$DATA" --train.out_dir "$dir" \
    --train.overwrite true --train.sample_tokens 0 --log.progress plain --train.steps "$STEPS" \
    --train.eval_every "$STEPS" --checkpoint.every 0 "${RATE[@]}" "$@" >"$dir.log" 2>&1 || { tail -5 "$dir.log"; exit 1; }
  grep -E 'val loss' "$dir.log" | tail -n 1
}
for ((round = 1; round <= ROUNDS; ++round)); do
  if (( round % 2 )); then
    run sync "$round"
    run delayed "$round" "${DELAYED[@]}"
  else
    run delayed "$round" "${DELAYED[@]}"
    run sync "$round"
  fi
done

$PYTHON - "$OUT" "$ROUNDS" "$START" "$EXTRAPOLATE" "$LR" <<'PY'
import json, statistics, sys
out, rounds, start, extrapolated, lr = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]
def lines(name, r):
    return [json.loads(l) for l in open(f"{out}/{name}-{r}/metrics.jsonl")]
def median_step(name, r):
    # The steps after the delayed start; the first one pays no wait and is left out.
    return statistics.median(l["step_seconds"] for l in lines(name, r) if l["kind"] == "train" and l["step"] > start + 1)
def final_val(name, r):
    return [l["loss"] for l in lines(name, r) if l["kind"] == "val"][-1]
sync = statistics.median(median_step("sync", r) for r in range(1, rounds + 1))
late = statistics.median(median_step("delayed", r) for r in range(1, rounds + 1))
wait = statistics.median(l["update_wait_seconds"] for l in lines("delayed", 1) if l["kind"] == "train" and l["step"] > start + 1)
base, val = final_val("sync", 1), final_val("delayed", 1)
for r in range(1, rounds + 1):
    print(f"round {r}: median step sync {median_step('sync', r):.4f} s, delayed {median_step('delayed', r):.4f} s")
print(f"RESULT delayed_update val_loss_delta={(val - base) / base:.4f} speedup={sync / late:.3f} "
      f"sync_step_seconds={sync:.4f} delayed_step_seconds={late:.4f} update_wait_seconds={wait:.4f} "
      f"extrapolated={extrapolated} lr={lr}")
PY
