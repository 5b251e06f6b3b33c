#!/usr/bin/env bash
# The planner on this machine: calibrates it (`tessera plan --calibrate-here`), trains the default
# model a few steps under each of six layouts (one process, dp 2, dp 2 with ZeRO-3, tp 2, pp 2,
# tp 2 · pp 2 · dp 2 with ZeRO-1) through `tessera launch`, and holds what `tessera plan --config`
# predicts for the same config against what the runs measured: every rank's peak memory per tag
# (metrics.jsonl's memory_by_rank) and the median step time.
#
#   bench/planner_here.sh
#   STEPS=16 ROUNDS=5 bench/planner_here.sh
#   CLUSTER=cluster-here.toml bench/planner_here.sh   # plan with a cluster calibrated before
#
# This machine's speed drifts by ±10 % over minutes (it is shared), so a prediction is held against
# runs made right after its calibration: every round calibrates afresh, then runs every layout once
# (rotating the order), and each layout's step is predicted with that round's cluster. With
# CALIBRATE=layout every layout's run gets a calibration of its own, taken just before it (about
# 45 s more per run), for a machine whose speed moves within a round. A layout's step error is the
# median over the rounds of (predicted − measured) / measured.
#
# Environment: TESSERA (the binary, default build/release/src/cli/tessera), DATA (default
# data/kjv-2048, prepared with a 2048-token vocabulary if missing), OUT (run folders, default
# build/bench/planner_here), STEPS (per run, default 10; the first 3 are warm-up and not timed),
# ROUNDS (default 3), CALIBRATE (round: one calibration per round, the default; layout: one before
# every run), CLUSTER (a cluster TOML to plan every run with, instead of calibrating).
#
# Prints two Markdown tables (per layout: the worst rank's memory peak, every tag at once, predicted and
# measured, the largest error of any tag on any rank, the median over the rounds of the predicted
# and the measured step time and of the step error, and each round's error; then every tag of
# every layout's worst rank) and per layout
#   RESULT planner_here layout=<name> mem_error=<largest |relative error| of a tag, any rank> time_error=<median over the rounds of (predicted - measured) / measured>
# A pipeline stage's sent boundary tensors (its comm tag) live until the peer has taken them, which
# depends on timing: the planner counts the bound of two, a rank holds one or two; that tag is
# checked against the bound ("bound ok") instead of counted in mem_error. The load average is
# printed before and after each run: timings taken under other work are slower.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TESSERA="${TESSERA:-$ROOT/build/release/src/cli/tessera}"
DATA="${DATA:-$ROOT/data/kjv-2048}"
OUT="${OUT:-$ROOT/build/bench/planner_here}"
STEPS="${STEPS:-10}"
ROUNDS="${ROUNDS:-3}"
WARMUP=3

if [[ ! -x $TESSERA ]]; then
  echo "no tessera binary at $TESSERA: build it first (cmake --preset release -G Ninja && cmake --build --preset release)" >&2
  exit 2
fi
(( STEPS > WARMUP )) || { echo "STEPS must exceed the $WARMUP warm-up steps" >&2; exit 2; }
if [[ ! -f $DATA/data.json ]]; then
  echo "== preparing the King James Bible in $DATA"
  "$TESSERA" data prepare --input kjv --out "$DATA" --vocab-size 2048
fi
mkdir -p "$OUT"
echo "== $(date -u '+%Y-%m-%d %H:%M UTC'), $(lscpu | sed -nE 's/^Model name: *//p'), $(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc) cores, /proc/loadavg: $(cat /proc/loadavg)"

CLUSTER="${CLUSTER:-}"
CALIBRATE="${CALIBRATE:-round}"
[[ $CALIBRATE == round || $CALIBRATE == layout ]] ||
  { echo "CALIBRATE is 'round' (one calibration per round) or 'layout' (one before every run), not '$CALIBRATE'" >&2; exit 2; }
calibrate() {  # calibrate() FILE WHEN: writes FILE, prints the calibration's summary
  echo "== $2, calibrating: $TESSERA plan --calibrate-here --out $1"
  "$TESSERA" plan --calibrate-here --out "$1" | grep -vE '^ +[0-9]+ B:'
}

# One config for the runs and the plans: the default model, four microbatches of 4 per step.
RUN=(--config "$ROOT/configs/default.toml" --data.dir "$DATA" --train.micro_batch_size 4)
TRAIN=(--train.overwrite true --train.steps "$STEPS" --train.eval_every 0 --train.eval_batches 1 --checkpoint.every 0
       --train.sample_tokens 0 --log.progress plain --log.every 1)
LAYOUTS=(
  "one|1|"
  "dp2|2|--parallel.dp 2"
  "dp2_zero3|2|--parallel.dp 2 --parallel.zero_stage 3"
  "tp2|2|--parallel.tp 2"
  "pp2|2|--parallel.pp 2"
  "tp2_pp2_dp2|8|--parallel.tp 2 --parallel.pp 2 --parallel.dp 2 --parallel.zero_stage 1"
)
for ((r = 0; r < ROUNDS; r++)); do
  cluster="$CLUSTER"
  if [[ -z $cluster && $CALIBRATE == round ]]; then
    cluster="$OUT/cluster-here.round$r.toml"
    calibrate "$cluster" "round $r"
  fi
  # Rotate which layout runs first, so a drift in the machine's load favours none.
  for ((i = 0; i < ${#LAYOUTS[@]}; i++)); do
    entry="${LAYOUTS[(i + r) % ${#LAYOUTS[@]}]}"
    IFS='|' read -r name ranks keys <<< "$entry"
    dir="$OUT/$name.round$r"
    launcher=(); (( ranks > 1 )) && launcher=(launch -n "$ranks" --)
    if [[ -z $CLUSTER && $CALIBRATE == layout ]]; then
      cluster="$OUT/cluster-here.$name.round$r.toml"
      calibrate "$cluster" "round $r, before $name"
    fi
    # shellcheck disable=SC2086  # the layout's keys are words
    "$TESSERA" "${launcher[@]}" train "${RUN[@]}" "${TRAIN[@]}" $keys --train.out_dir "$dir" > "$dir.log" 2>&1 < /dev/null ||
      { cat "$dir.log"; exit 1; }
    echo "== round $r, $name: tessera ${launcher[*]} train ${RUN[*]} $keys; /proc/loadavg after: $(cat /proc/loadavg)"
    # shellcheck disable=SC2086
    "$TESSERA" plan "${RUN[@]}" $keys --cluster "$cluster" --json > "$dir.plan.json"
    # shellcheck disable=SC2086
    "$TESSERA" plan "${RUN[@]}" $keys --cluster "$cluster" > "$dir.plan.txt"
  done
done
echo "== /proc/loadavg at the end: $(cat /proc/loadavg)"

python3 - "$OUT" "$WARMUP" "$ROUNDS" "${LAYOUTS[@]}" <<'EOF'
import json, statistics, sys

out, warmup, rounds, layouts = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4:]
TAGS = ["params", "grads", "optimizer", "activations", "comm", "workspace", "weight_stash", "working_copies"]
MiB = 1024.0 * 1024.0

def keys_of(words):
    w = words.split()
    return dict(zip(w[::2], w[1::2]))

rows, details, results = [], [], []
for entry in layouts:
    name, ranks, words = entry.split("|")
    k = keys_of(words)
    tp, dp = int(k.get("--parallel.tp", 1)), int(k.get("--parallel.dp", 1))
    plans = [json.load(open(f"{out}/{name}.round{r}.plan.json")) for r in range(rounds)]
    runs = [[json.loads(l) for l in open(f"{out}/{name}.round{r}/metrics.jsonl") if '"kind":"train"' in l]
            for r in range(rounds)]
    medians = [statistics.median([l["step_seconds"] for l in lines][warmup:]) for lines in runs]
    errors = [(p["step_seconds"] - m) / m for p, m in zip(plans, medians)]
    # Memory does not depend on the calibration: every round's peaks against its plan (the comm tag
    # against its bound), the worst rank of the last round in the tables.
    worst_error, bound_ok = 0.0, True
    for plan, lines in zip(plans, runs):
        measured_ranks = lines[-1].get("memory_by_rank") or [lines[-1]["memory"]]
        pipelined = len(plan["stages"]) > 1
        worst_rank = 0
        for r, got in enumerate(measured_ranks):
            want = plan["stages"][r // (tp * dp)]
            if got["peak"] > measured_ranks[worst_rank]["peak"]:
                worst_rank = r
            for tag in TAGS:
                p, m = want[tag], got[tag]
                if tag == "comm" and pipelined:
                    bound_ok = bound_ok and p / 2 <= m <= p
                    continue
                error = abs(p - m) / m if m > 0 else (0.0 if p == 0 else float("inf"))
                worst_error = max(worst_error, error)
    stage = worst_rank // (tp * dp)
    want, got = plan["stages"][stage], measured_ranks[worst_rank]
    predicted_step = statistics.median(p["step_seconds"] for p in plans)
    measured_step = statistics.median(medians)
    time_error = statistics.median(errors)
    rows.append(f"| {name} | {ranks} | {stage} | {want['peak'] / MiB:.2f} | {got['peak'] / MiB:.2f} | "
                f"{100 * worst_error:.2f}%{' (comm: bound ok)' if pipelined and bound_ok else ' (comm: BOUND EXCEEDED)' if pipelined else ''} | "
                f"{predicted_step:.3f} | {measured_step:.3f} | {100 * time_error:+.1f}% | "
                f"{', '.join(f'{100 * e:+.1f}%' for e in errors)} |")
    details.append(f"| {name} (rank {worst_rank}) | " +
                   " | ".join(f"{want[t] / MiB:.3f} / {got[t] / MiB:.3f}" for t in TAGS[:6]) + " |")
    results.append(f"RESULT planner_here layout={name} mem_error={worst_error:.4f} time_error={time_error:+.4f}")

print("\n| layout | ranks | worst stage | predicted memory peak (MiB) | measured (MiB) | largest tag error, any rank | "
      "predicted step (s) | measured step (s) | step error | each round's |")
print("|---|---|---|---|---|---|---|---|---|---|")
print("\n".join(rows))
print("\nPer tag on the worst rank, predicted / measured MiB:\n")
print("| layout | " + " | ".join(TAGS[:6]) + " |")
print("|---|" + "---|" * 6)
print("\n".join(details))
print()
print("\n".join(results))
EOF
