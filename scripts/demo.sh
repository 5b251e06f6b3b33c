#!/usr/bin/env bash
# The main job: installs what is missing, builds Release, prepares the King James Bible and a
# SentencePiece tokenizer, and trains the default small GPT for a few minutes, printing progress,
# sample text, the paths of the loss chart, metrics and checkpoint, and last a RESULT line.
# Extra arguments are config overrides, e.g. scripts/demo.sh --train.steps 100. Every run starts
# over in runs/default (unless the overrides resume it).
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh
cmake --preset release -G Ninja > /dev/null
cmake --build --preset release --target tessera -j "$(nproc)"
tessera=build/release/src/cli/tessera

if [ ! -f data/kjv/data.json ]; then
  "$tessera" data prepare --input kjv --out data/kjv --vocab-size 4096
fi
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-$(nproc)}"
# Each demo starts over in its run folder, unless it was asked to resume one.
fresh=(--train.overwrite true)
[[ " $* " == *checkpoint.resume* ]] && fresh=()
"$tessera" train --config configs/default.toml "${fresh[@]}" "$@"
