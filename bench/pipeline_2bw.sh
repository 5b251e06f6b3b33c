#!/usr/bin/env bash
# PipeDream-2BW against 1F1B on the same training run: the default small GPT (configs/default.toml)
# on the King James Bible, two pipeline stages, the same steps, seed and batches. 1F1B applies each
# step's gradient to the weights it was computed on; 2BW applies it one step late (the gradient of
# W(t - 1) to W(t)) and never drains between logging points. The question is what that delay costs
# in validation loss. Under parallel.weight_version = "newest" (the default) only the microbatches a
# stage starts before its previous step read the older weights; "delayed" is the paper's uniform
# delay.
#
#   bench/pipeline_2bw.sh                  # 600 steps each, as configs/default.toml
#   STEPS=300 bench/pipeline_2bw.sh
#
# Environment: STEPS (default 600), WEIGHT_VERSION (2BW's parallel.weight_version: newest or
# delayed; default newest), LR and MIN_LR (both runs' optim.lr and optim.min_lr; default
# the config's), MICRO (micro batch; default 4, so 16 / 4 = 4 microbatches per
# step, 2BW needs at least as many as stages), TESSERA (the binary; default
# build/release/src/cli/tessera), DATA (the prepared corpus; default data/kjv, prepared when
# missing), OUT (run folders; default build/bench/pipeline_2bw).
#
# Prints the runs' progress, then:
#   RESULT pipeline_2bw steps=<N> weight_version=<V> val_loss_1f1b=<X> val_loss_2bw=<Y> rel_diff=<(Y - X) / X>
# and exits 3 when 2BW's validation loss is more than 2 % above 1F1B's.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TESSERA="${TESSERA:-$ROOT/build/release/src/cli/tessera}"
STEPS="${STEPS:-600}"
WEIGHT_VERSION="${WEIGHT_VERSION:-newest}"
MICRO="${MICRO:-4}"
# The learning rate (and the floor of its cosine) of both runs: the config's unless given.
LR_ARGS=()
[[ -n ${LR:-} ]] && LR_ARGS+=(--optim.lr "$LR")
[[ -n ${MIN_LR:-} ]] && LR_ARGS+=(--optim.min_lr "$MIN_LR")
DATA="${DATA:-$ROOT/data/kjv}"
OUT="${OUT:-$ROOT/build/bench/pipeline_2bw}"

if [[ ! -x $TESSERA ]]; then
  echo "no tessera binary at $TESSERA: build it first (cmake --preset release -G Ninja && cmake --build --preset release)" >&2
  exit 2
fi
if [[ ! -f $DATA/data.json ]]; then
  echo "== preparing the King James Bible in $DATA"
  "$TESSERA" data prepare --input kjv --out "$DATA" --vocab-size 4096
fi
echo "== $(date -u '+%Y-%m-%d %H:%M UTC'), $(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc) cores, /proc/loadavg: $(cat /proc/loadavg)"
# One thread per process: the two stages share the machine's cores.
export OMP_NUM_THREADS=1
val_loss() {
  # The last evaluation of the run: its metrics line {"kind":"val","loss":...}.
  grep '"kind":"val"' "$1/metrics.jsonl" | tail -n 1 | sed -E 's/.*"loss":([-0-9.eE+]+).*/\1/'
}
for schedule in 1f1b 2bw; do
  echo "== $schedule: $STEPS steps, pp 2, micro batch $MICRO"
  VERSION_ARGS=()
  [[ $schedule == 2bw ]] && VERSION_ARGS=(--parallel.weight_version "$WEIGHT_VERSION")
  "$TESSERA" launch -n 2 -- train --config "$ROOT/configs/default.toml" --data.dir "$DATA" \
    --train.out_dir "$OUT/$schedule" --train.overwrite true --train.steps "$STEPS" --train.micro_batch_size "$MICRO" \
    --parallel.pp 2 --parallel.schedule "$schedule" --checkpoint.every 0 --train.sample_tokens 0 --log.progress plain \
    "${LR_ARGS[@]}" "${VERSION_ARGS[@]}"
done
one=$(awk -v x="$(val_loss "$OUT/1f1b")" 'BEGIN { printf "%.4f", x }')
two=$(awk -v x="$(val_loss "$OUT/2bw")" 'BEGIN { printf "%.4f", x }')
rel=$(awk -v a="$one" -v b="$two" 'BEGIN { printf "%.4f", (b - a) / a }')
echo "RESULT pipeline_2bw steps=$STEPS weight_version=$WEIGHT_VERSION val_loss_1f1b=$one val_loss_2bw=$two rel_diff=$rel"
if awk -v r="$rel" 'BEGIN { exit !(r > 0.02) }'; then
  echo "2BW's validation loss is more than 2 % above 1F1B's" >&2
  exit 3
fi
