#!/usr/bin/env bash
# Data parallelism across a slow link: dp 2, one rank on each of two nodes of the test cluster
# (scripts/cluster.sh: network namespaces on this machine, TCP between them, the link shaped to
# LINK_GBIT Gbit/s), with each way of reducing the gradients: dense f32, bf16 gradient messages,
# top-k, PowerSGD and 1-bit Adam. Every method compresses from the first step (no dense warm-up:
# this measures time, not convergence); the step time is the median of the steps after the untimed
# first ones (1-bit Adam's freeze among them).
#
# Beside each measured step, the planner's prediction of it (`tessera plan --config` with the same
# run), on a cluster file measured here: this machine as one node (`tessera plan --calibrate-here`,
# or NODE_CLUSTER), then the link between the two nodes (`--calibrate-here --hosts`), which the
# bench prints.
#
# And the share of the dense gradient reduction hidden behind backward: the reduction is timed
# whole as the ranks' wait for it in a run whose gradients form one bucket (reduced after the last
# backward, nothing hides it), and its exposed part as their wait in the dense run with several
# buckets (log.profile's communication time per step, both); hidden = whole - exposed.
#
#   bench/nodes.sh                              # the default model, 20 steps each at 1 Gbit/s
#   MODEL=gpt2-124m bench/nodes.sh              # a 124M-shaped model, 5 steps each (3 timed)
#   STEPS=50 LINK_GBIT=0.5 bench/nodes.sh
#   MODEL=gpt2-124m ROUNDS=2 bench/nodes.sh     # every method twice, interleaved
#
# Needs root (network namespaces); exits 77 where the cluster cannot be made. The cluster is
# removed when the script ends, also on failure or Ctrl-C.
#
# Environment: MODEL (default: configs/default.toml, micro-batch 8 per rank, 2 MiB buckets;
# gpt2-124m: L=12, C=768, H=12, V=50257 with sequences of 256, two per rank, 25 MiB buckets), STEPS
# (default 20; 5 for gpt2-124m), LINK_GBIT (default 1), METHODS (default "dense bf16 topk powersgd
# onebit_adam"; dense first), ROUNDS (default 1: each method's runs, interleaved round by round so
# that a machine shared with other work slows them alike; the timed steps of all rounds pooled),
# NODE_CLUSTER (a cluster file of this machine from `tessera plan
# --calibrate-here`; default: measured first, a few minutes), TESSERA (default
# build/release/src/cli/tessera), DATA (the prepared corpus; default data/kjv, prepared when
# missing), OUT (run folders; default build/bench/nodes/MODEL).
#
# Prints:
#   RESULT nodes link_gbps=<shaped> measured_gbps=<--calibrate-here --hosts> latency_us=<its latency>
#   RESULT nodes model=<m> method=<m> link_gbps=<b> step_seconds=<s> speedup_vs_dense=<dense / it>
#          predicted_step_seconds=<planner> prediction_error=<predicted / measured - 1>
#   RESULT nodes model=<m> overlap=<hidden / whole> reduction_seconds=<whole> exposed_seconds=<exposed>
#          backward_seconds=<backward> hidden_of_backward=<hidden / backward> step_seconds=<dense>
#          one_bucket_step_seconds=<dense with one bucket>
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TESSERA="${TESSERA:-$ROOT/build/release/src/cli/tessera}"
MODEL="${MODEL:-default}"
LINK_GBIT="${LINK_GBIT:-1}"
ROUNDS="${ROUNDS:-1}"
DATA="${DATA:-$ROOT/data/kjv}"
OUT="${OUT:-$ROOT/build/bench/nodes/$MODEL}"
CLUSTER=bench

case "$MODEL" in
  default)
    STEPS="${STEPS:-20}"
    UNTIMED=3
    MODEL_ARGS="--train.micro_batch_size 8"
    # The model's 17 MB of gradients in several buckets, so that backward has some to hide.
    BUCKET_MB=2
    ;;
  gpt2-124m)
    STEPS="${STEPS:-5}"
    UNTIMED=2
    MODEL_ARGS="--model.n_layer 12 --model.n_head 12 --model.n_embd 768 --model.seq_len 256 --model.vocab_size 50257
                --train.batch_size 4 --train.micro_batch_size 2 --optim.warmup_steps 1"
    BUCKET_MB=25
    ;;
  *)
    echo "MODEL=$MODEL: give default or gpt2-124m" >&2
    exit 2
    ;;
esac

if [[ ! -x $TESSERA ]]; then
  echo "no tessera binary at $TESSERA: build it first (cmake --preset release -G Ninja && cmake --build --preset release)" >&2
  exit 2
fi
if (( STEPS < UNTIMED + 2 )); then
  echo "STEPS = $STEPS: give at least $((UNTIMED + 2)) (the first $UNTIMED steps are not timed)" >&2
  exit 2
fi
if [[ ! -f $DATA/data.json ]]; then
  echo "== preparing the King James Bible in $DATA"
  "$TESSERA" data prepare --input kjv --out "$DATA" --vocab-size 4096
fi
mkdir -p "$OUT"

status=0
"$ROOT/scripts/cluster.sh" up 2 --name "$CLUSTER" --bandwidth "${LINK_GBIT}gbit" || status=$?
(( status == 0 )) || exit "$status"
trap '"$ROOT/scripts/cluster.sh" down --name "$CLUSTER"' EXIT
eval "$("$ROOT/scripts/cluster.sh" env --name "$CLUSTER")"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
echo "== $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores, /proc/loadavg: $(cat /proc/loadavg)"
echo "== link: ${LINK_GBIT} Gbit/s each way between $CLUSTER-node1 and $CLUSTER-node2 (tc tbf)"

# The cluster as the planner sees it: this machine as one node, then the link between the nodes.
NODES_CLUSTER="$OUT/cluster-nodes.toml"
if [[ -n ${NODE_CLUSTER:-} ]]; then
  cp "$NODE_CLUSTER" "$NODES_CLUSTER"
else
  echo "== measuring this machine as one node (tessera plan --calibrate-here)"
  "$TESSERA" plan --calibrate-here --out "$NODES_CLUSTER" | tail -n 3
fi
"$TESSERA" plan --calibrate-here --hosts "$CLUSTER-node1:1,$CLUSTER-node2:1" --out "$NODES_CLUSTER" | tee "$OUT/link.txt" | tail -n 2
awk -v b="$LINK_GBIT" '/^inter-node link:/ {
    for (i = 1; i <= NF; ++i) { if ($i == "latency") lat = $(i + 1); if ($i == "Gbit/s;") gbps = substr($(i - 1), 2) }
    printf "RESULT nodes link_gbps=%g measured_gbps=%s latency_us=%s\n", b, gbps, lat }' "$OUT/link.txt"

declare -A ARGS=(
  [dense]=""
  [dense_one_bucket]="--parallel.bucket_mb 1048576"
  [bf16]="--parallel.grad_dtype bf16"
  [topk]="--parallel.compression topk --compression.ratio 0.01"
  [powersgd]="--parallel.compression powersgd --compression.rank 4"
  [onebit_adam]="--optim.name onebit_adam --optim.freeze_step 2"
)
read -r -a METHODS <<< "${METHODS:-dense bf16 topk powersgd onebit_adam}"
[[ ${METHODS[0]} == dense ]] || { echo "METHODS must start with dense (the run the others are compared with)" >&2; exit 2; }

# The run of method $1 into folder $2, as train and plan --config both take it. Every run is
# profiled (steps 2-4), so that the profiler's small cost is the same for all. No checkpoint is
# written: the 124M model's final one is 1.5 GB per run, and the bench only reads the metrics.
run_args() {
  # shellcheck disable=SC2086
  echo --config "$ROOT/configs/default.toml" --data.dir "$DATA" --train.out_dir "$OUT/$2" --train.overwrite true \
    --train.steps "$STEPS" $MODEL_ARGS --parallel.bucket_mb "$BUCKET_MB" \
    --parallel.dp 2 --checkpoint.every 0 --checkpoint.at_end false --train.eval_every 0 --train.eval_batches 1 --train.sample_tokens 0 --log.progress plain \
    --log.profile true ${ARGS[$1]}
}

# The run folders of a method, one per round.
folders() { for round in $(seq 1 "$ROUNDS"); do echo "$OUT/$1.r$round"; done; }

# Median step_seconds of the train lines after the untimed ones, every round's pooled.
step_seconds() {
  for folder in $(folders "$1"); do
    grep '"kind":"train"' "$folder/metrics.jsonl" | tail -n +$((UNTIMED + 1)) | sed -E 's/.*"step_seconds":([-0-9.eE+]+).*/\1/'
  done | sort -g | awk '{ v[NR] = $1 } END { printf "%.4f", NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

# Seconds per step the ranks waited for communication (log.profile), the mean over ranks and rounds.
communication_seconds() {
  # shellcheck disable=SC2046
  awk '$1 == "communication" { sum += $2; n += 1 } END { printf "%.4f", sum / n / 1000 }' \
    $(for folder in $(folders "$1"); do echo "$folder/profile.txt"; done)
}

# Seconds per step of the backward actions of rank 0 (their whole length in trace.json), over the
# profiled steps of every round.
backward_seconds() {
  # shellcheck disable=SC2046
  python3 -c '
import json, sys
steps, total = 0, 0.0
for path in sys.argv[1:]:
    events = json.load(open(path))
    events = events["traceEvents"] if isinstance(events, dict) else events
    mine = [e for e in events if e.get("ph") == "X" and e.get("pid") == 0]
    steps += len({e["args"]["step"] for e in mine if "step" in e.get("args", {})})
    total += sum(e["dur"] for e in mine if e.get("name") == "backward")
print("%.4f" % (total / 1e6 / max(1, steps)))' $(for folder in $(folders "$1"); do echo "$folder/trace.json"; done)
}

predicted_seconds() {
  # shellcheck disable=SC2046
  "$TESSERA" plan --cluster "$NODES_CLUSTER" --ranks 2 --json $(run_args "$1" "$1.r1") |
    sed -E 's/.*"step_seconds":([-0-9.eE+]+).*/\1/'
}

for round in $(seq 1 "$ROUNDS"); do
  for method in "${METHODS[@]}" dense_one_bucket; do
    echo "== $method, round $round of $ROUNDS: $STEPS steps, dp 2 on two nodes ($(date -u +%H:%M:%S), load $(cut -d' ' -f1 /proc/loadavg))"
    # One thread per rank: the two nodes share this machine's cores.
    # shellcheck disable=SC2046
    "$TESSERA" launch -n 2 --threads 1 --hosts "$CLUSTER-node1:1,$CLUSTER-node2:1" -- train $(run_args "$method" "$method.r$round") |
      tail -n 2
  done
done
echo "== $(date -u '+%Y-%m-%d %H:%M UTC'), /proc/loadavg: $(cat /proc/loadavg)"
dense=$(step_seconds dense)
for method in "${METHODS[@]}"; do
  s=$(step_seconds "$method")
  p=$(predicted_seconds "$method")
  awk -v model="$MODEL" -v m="$method" -v b="$LINK_GBIT" -v s="$s" -v d="$dense" -v p="$p" \
    'BEGIN { printf "RESULT nodes model=%s method=%s link_gbps=%g step_seconds=%.4f speedup_vs_dense=%.2f predicted_step_seconds=%.4f prediction_error=%+.3f\n", model, m, b, s, d / s, p, p / s - 1 }'
done
whole=$(communication_seconds dense_one_bucket)
exposed=$(communication_seconds dense)
backward=$(backward_seconds dense_one_bucket)
# The same from the other side: the step the buckets save against one bucket (the reduction's
# progress and TCP take cycles from the compute it hides behind, which the waits do not show).
one_bucket=$(step_seconds dense_one_bucket)
awk -v model="$MODEL" -v w="$whole" -v e="$exposed" -v b="$backward" -v d="$dense" -v o="$one_bucket" \
  'BEGIN { printf "RESULT nodes model=%s overlap=%.3f reduction_seconds=%.4f exposed_seconds=%.4f backward_seconds=%.4f hidden_of_backward=%.3f step_seconds=%.4f one_bucket_step_seconds=%.4f\n", model, (w - e) / w, w, e, b, (w - e) / b, d, o }'
