#!/usr/bin/env bash
# Mixed precision's convergence: the default demo (configs/default.toml on the King James Bible)
# trained in fp32, bf16 and fp16 (dynamic loss scale) from the same seed, on the same batches;
# the final validation losses compared with fp32's. The issue's bar: within 1%.
#
#   bench/precision_demo.sh
#   STEPS=300 COMPUTES="bf16" bench/precision_demo.sh
#
# Environment: TESSERA (the binary, default build/release/src/cli/tessera), DATA (default data/kjv,
# prepared if missing), OUT (run folders, default build/bench/precision_demo), STEPS (default: the
# config's 600), COMPUTES (the 16-bit dtypes compared with fp32, default "bf16 fp16").
#
# Prints per dtype
#   RESULT precision demo compute=<dtype> val_loss=<x> fp32_val_loss=<y> delta=<(x - y) / y> skipped_steps=<n>
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TESSERA="${TESSERA:-$ROOT/build/release/src/cli/tessera}"
DATA="${DATA:-$ROOT/data/kjv}"
OUT="${OUT:-$ROOT/build/bench/precision_demo}"
COMPUTES="${COMPUTES:-bf16 fp16}"
steps=()
[[ -n ${STEPS:-} ]] && steps=(--train.steps "$STEPS")

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

# The last validation loss and the skipped steps of a run folder.
final_val() { grep '"kind":"val"' "$1/metrics.jsonl" | tail -n 1 | sed -E 's/.*"loss":([-0-9.eE+]+).*/\1/'; }
skipped() { grep '"kind":"train"' "$1/metrics.jsonl" | tail -n 1 | sed -E 's/.*"skipped_steps":([0-9]+).*/\1/'; }

run() {
  local compute=$1 dir="$OUT/$1"
  echo "== $compute"
  "$TESSERA" train --config "$ROOT/configs/default.toml" --data.dir "$DATA" --train.out_dir "$dir" \
    --train.overwrite true --train.sample_tokens 0 --log.progress plain --precision.compute "$compute" \
    "${steps[@]}" >"$dir.log" 2>&1 || { cat "$dir.log"; exit 1; }
  grep -E '^precision:|val loss' "$dir.log" | tail -n 3
}
mkdir -p "$OUT"
run fp32
base=$(final_val "$OUT/fp32")
for compute in $COMPUTES; do
  run "$compute"
  val=$(final_val "$OUT/$compute")
  delta=$(awk -v a="$val" -v b="$base" 'BEGIN { printf "%.4f", (a - b) / b }')
  echo "RESULT precision demo compute=$compute val_loss=$val fp32_val_loss=$base delta=$delta skipped_steps=$(skipped "$OUT/$compute")"
done
