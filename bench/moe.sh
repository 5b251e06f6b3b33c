#!/usr/bin/env bash
# Mixture of experts against the dense model with the same active FLOPs per token: the default
# demo (configs/default.toml) and configs/moe.toml (its MLPs replaced by 4 experts of the same
# width, top-1), same seed, same batches, same steps, one after the other on this machine. Reports
# the final validation loss, the training throughput (median of the logged tokens/s) and the MoE
# run's last drop rate.
#
#   bench/moe.sh
#   STEPS=300 bench/moe.sh
#
# Environment: TESSERA (the binary, default build/release/src/cli/tessera), DATA (default data/kjv,
# prepared if missing), OUT (run folders, default build/bench/moe), STEPS (default: the configs' 600).
#
# Prints
#   RESULT moe config=<dense|moe> params=<n> active_params=<n> val_loss=<x> tokens_per_second=<median>
#   RESULT moe val_loss_delta=<(moe - dense) / dense> speed_ratio=<moe / dense tokens/s> drop_rate=<x>
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TESSERA="${TESSERA:-$ROOT/build/release/src/cli/tessera}"
DATA="${DATA:-$ROOT/data/kjv}"
OUT="${OUT:-$ROOT/build/bench/moe}"
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

final_val() { grep '"kind":"val"' "$1/metrics.jsonl" | tail -n 1 | sed -E 's/.*"loss":([-0-9.eE+]+).*/\1/'; }
median_speed() {
  grep '"kind":"train"' "$1/metrics.jsonl" | sed -E 's/.*"tokens_per_second":([-0-9.eE+]+).*/\1/' | sort -g |
    awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}
params() { sed -nE 's/^model: ([0-9]+) parameters.*/\1/p' "$1"; }

declare -A val speed
for config in dense moe; do
  file="$ROOT/configs/default.toml"
  [[ $config == moe ]] && file="$ROOT/configs/moe.toml"
  run="$OUT/$config"
  echo "== $config: $file"
  "$TESSERA" train --config "$file" --data.dir "$DATA" --train.out_dir "$run" --train.overwrite true \
    --train.sample_tokens 0 --log.progress plain "${steps[@]}" | tee "$OUT/$config.log"
  val[$config]="$(final_val "$run")"
  speed[$config]="$(median_speed "$run")"
  active="$(params "$OUT/$config.log")"
  if [[ $config == moe ]]; then
    active="$(sed -nE 's/.* ([0-9]+) parameters active per token.*/\1/p' "$OUT/$config.log")"
  fi
  echo "RESULT moe config=$config params=$(params "$OUT/$config.log") active_params=$active val_loss=${val[$config]} tokens_per_second=${speed[$config]}"
done
drop="$(grep '"kind":"train"' "$OUT/moe/metrics.jsonl" | tail -n 1 | sed -E 's/.*"moe_drop_rate":([-0-9.eE+]+).*/\1/')"
awk -v m="${val[moe]}" -v d="${val[dense]}" -v ms="${speed[moe]}" -v ds="${speed[dense]}" -v drop="$drop" \
  'BEGIN { printf "RESULT moe val_loss_delta=%.4f speed_ratio=%.3f drop_rate=%s\n", (m - d) / d, ms / ds, drop }'
