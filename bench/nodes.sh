#!/usr/bin/env bash
# Data parallelism across a slow link: dp 2, one rank on each of two nodes of the test cluster
# (scripts/cluster.sh: network namespaces on this machine, TCP between them, the link shaped to
# LINK_GBIT Gbit/s), for the default model (configs/default.toml) with each way of reducing the
# gradients: dense f32, bf16 gradient messages, top-k, PowerSGD and 1-bit Adam. Every method
# compresses from the first step (no dense warm-up: this measures time, not convergence), and the
# step time is the median of every step after the third (after 1-bit Adam's freeze).
#
#   bench/nodes.sh                      # 20 steps each at 1 Gbit/s
#   STEPS=50 LINK_GBIT=0.5 bench/nodes.sh
#
# Needs root (network namespaces); exits 77 where the cluster cannot be made. The cluster is
# removed when the script ends, also on failure or Ctrl-C.
#
# Environment: STEPS (default 20), LINK_GBIT (default 1), METHODS (default "dense bf16 topk
# powersgd onebit_adam"; dense first), TESSERA (default build/release/src/cli/tessera), DATA (the
# prepared corpus; default data/kjv, prepared when missing), OUT (run folders; default
# build/bench/nodes).
#
# Prints:
#   RESULT nodes method=<m> link_gbps=<b> step_seconds=<s> speedup_vs_dense=<dense step / its step>
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TESSERA="${TESSERA:-$ROOT/build/release/src/cli/tessera}"
STEPS="${STEPS:-20}"
LINK_GBIT="${LINK_GBIT:-1}"
DATA="${DATA:-$ROOT/data/kjv}"
OUT="${OUT:-$ROOT/build/bench/nodes}"
CLUSTER=bench

if [[ ! -x $TESSERA ]]; then
  echo "no tessera binary at $TESSERA: build it first (cmake --preset release -G Ninja && cmake --build --preset release)" >&2
  exit 2
fi
if (( STEPS < 5 )); then
  echo "STEPS = $STEPS: give at least 5 (the first 3 steps are not timed)" >&2
  exit 2
fi
if [[ ! -f $DATA/data.json ]]; then
  echo "== preparing the King James Bible in $DATA"
  "$TESSERA" data prepare --input kjv --out "$DATA" --vocab-size 4096
fi

status=0
"$ROOT/scripts/cluster.sh" up 2 --name "$CLUSTER" --bandwidth "${LINK_GBIT}gbit" || status=$?
(( status == 0 )) || exit "$status"
trap '"$ROOT/scripts/cluster.sh" down --name "$CLUSTER"' EXIT
eval "$("$ROOT/scripts/cluster.sh" env --name "$CLUSTER")"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
echo "== $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores, /proc/loadavg: $(cat /proc/loadavg)"
echo "== link: ${LINK_GBIT} Gbit/s each way between $CLUSTER-node1 and $CLUSTER-node2 (tc tbf)"

declare -A ARGS=(
  [dense]=""
  [bf16]="--parallel.grad_dtype bf16"
  [topk]="--parallel.compression topk --compression.ratio 0.01"
  [powersgd]="--parallel.compression powersgd --compression.rank 4"
  [onebit_adam]="--optim.name onebit_adam --optim.freeze_step 2"
)
read -r -a METHODS <<< "${METHODS:-dense bf16 topk powersgd onebit_adam}"
[[ ${METHODS[0]} == dense ]] || { echo "METHODS must start with dense (the run the others are compared with)" >&2; exit 2; }

# Median step_seconds of the train lines after the third step.
step_seconds() {
  grep '"kind":"train"' "$1/metrics.jsonl" | tail -n +4 | sed -E 's/.*"step_seconds":([-0-9.eE+]+).*/\1/' | sort -g |
    awk '{ v[NR] = $1 } END { printf "%.4f", NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

for method in "${METHODS[@]}"; do
  echo "== $method: $STEPS steps, dp 2 on two nodes"
  # shellcheck disable=SC2086
  # One thread per rank: the two nodes share this machine's cores.
  "$TESSERA" launch -n 2 --threads 1 --hosts "$CLUSTER-node1:1,$CLUSTER-node2:1" -- train \
    --config "$ROOT/configs/default.toml" --data.dir "$DATA" --train.out_dir "$OUT/$method" --train.overwrite true \
    --train.steps "$STEPS" --train.micro_batch_size 8 \
    --parallel.dp 2 --checkpoint.every 0 --train.eval_every 0 --train.sample_tokens 0 --log.progress plain \
    ${ARGS[$method]} | tail -n 2
done
dense=$(step_seconds "$OUT/dense")
for method in "${METHODS[@]}"; do
  s=$(step_seconds "$OUT/$method")
  awk -v m="$method" -v b="$LINK_GBIT" -v s="$s" -v d="$dense" \
    'BEGIN { printf "RESULT nodes method=%s link_gbps=%g step_seconds=%.4f speedup_vs_dense=%.2f\n", m, b, s, d / s }'
done
