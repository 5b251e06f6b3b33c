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
# First, from the recompute chain's simulator (no training; bench/recompute_bench --predict),
# Checkmate (memory.recompute = "checkmate", CBC under a 60 s limit) and DTR ("dtr") against Rotor's
# optimal schedule on the GPT-2 124M chain (12 layers, B 4, T 256) at five budgets from full
# recomputation's peak to none's: the extra compute of each (FLOP-model step time over none's,
# less 1), and the solver's status and time.
#
# Then Checkmate over the graph of operations of two GPT-2 and two Llama blocks of the 124M shape
# (B 4, T 256), recorded by running them (bench/remat_ops; OPS_BLOCKS, OPS_BATCH, OPS_SEQ,
# OPS_TIME_LIMIT change the shape and CBC's limit), against Rotor over the same blocks as a chain
# with the same measured op times, from below Rotor's least budget to none's peak; and DTR over the
# same graph at each budget (memory/remat/graph_dtr.h), whose schedule CBC starts from where it is
# the cheapest at hand (below Rotor's least budget, the only one).
#
# Prints, per budget and per encoding,
#   RESULT remat method=checkmate budget_mb=<b> extra_compute=<x> rotor=<y> status=<s> solve_seconds=<t> source=simulator
#   RESULT remat method=checkmate graph=ops arch=<a> blocks=<n> budget_mb=<b> extra_compute=<x> rotor=<y|none> status=<s> solve_seconds=<t>
#   RESULT remat method=dtr graph=ops arch=<a> blocks=<n> budget_mb=<b> extra_compute=<x|none> checkmate=<y|none>
#   RESULT remat method=dtr budget_mb=<b> extra_compute=<x> rotor=<y> checkmate=<z> source=simulator
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

if (( STEPS < 4 )); then
  echo "STEPS=$STEPS: the step times are the median after two warm-up steps, so give at least 4" >&2
  exit 2
fi
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

PREDICT="$(dirname "$TESSERA")/../../bench/recompute_bench"
if [[ -x $PREDICT ]]; then
  chain=(--gpt2-124m --seq 256 --batch 4)
  "$PREDICT" "${chain[@]}" --predict none,full | tail -n 1 >"$OUT/bounds.json"
  budgets=$($PYTHON - "$OUT/bounds.json" <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))["predicted"]
low, high = p["full"], p["none"]
print(" ".join(str(int(low + f * (high - low))) for f in (0.0, 0.1, 0.25, 0.5, 0.75)))
PY
)
  policies=none
  for b in $budgets; do policies+=",optimal:$b,checkmate:$b,dtr:$b"; done
  "$PREDICT" "${chain[@]}" --predict "$policies" | tail -n 1 >"$OUT/plans.json"
  $PYTHON - "$OUT/plans.json" <<'PY'
import json, sys
plans = json.load(open(sys.argv[1]))
j, solver = plans["model_time_ratio"], plans.get("checkmate", {})
budgets = sorted((k[4:] for k in j if k.startswith("dtr:")), key=float)
for budget in budgets:
    c = solver["checkmate:" + budget]
    print(f"RESULT remat method=checkmate budget_mb={budget} extra_compute={j['checkmate:' + budget] - 1:.4f} "
          f"rotor={j['optimal:' + budget] - 1:.4f} status={c['status'].replace(' ', '_')} "
          f"plan={c['source'].replace(' ', '_')} solve_seconds={c['solve_seconds']:.1f} source=simulator")
for budget in budgets:
    print(f"RESULT remat method=dtr budget_mb={budget} extra_compute={j['dtr:' + budget] - 1:.4f} "
          f"rotor={j['optimal:' + budget] - 1:.4f} checkmate={j['checkmate:' + budget] - 1:.4f} source=simulator")
PY
else
  echo "no $PREDICT: the Checkmate and DTR lines need the benchmarks built (cmake --build build/release --target recompute_bench)"
fi

OPS="$(dirname "$TESSERA")/../../bench/remat_ops"
if [[ -x $OPS ]]; then
  "$OPS" --blocks "${OPS_BLOCKS:-2}" --batch "${OPS_BATCH:-4}" --seq "${OPS_SEQ:-256}" \
    --time-limit "${OPS_TIME_LIMIT:-20}"
else
  echo "no $OPS: the op-graph lines need the benchmarks built (cmake --build build/release --target remat_ops)"
fi

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
