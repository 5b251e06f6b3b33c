#!/usr/bin/env bash
# Activation checkpointing: step time and activation peak of every recompute policy, side by side
# in one run (fp32, AdamW, 2 threads). Each round runs every policy once, each in a fresh process,
# in an order that rotates from round to round, so a drift in machine load does not favour one
# policy; the medians over rounds are compared with none's.
#
#   bench/recompute.sh                       # both configs
#   ROUNDS=3 CONFIGS=tiny bench/recompute.sh
#
# Environment: ROUNDS (rounds per config; default 5 for tiny, 3 for gpt2-124M), CONFIGS (default
# "tiny gpt2-124M"), BUILD_DIR (default build/bench), RESULTS (JSON lines of every run, default
# $BUILD_DIR/recompute.jsonl), SVG (the chart, default $BUILD_DIR/recompute.svg).
#
# Policies: none, full, every_k (k = ⌈√L⌉), every_k with one other k, selective, and optimal and
# dtr at three budgets: the peaks the two every_k runs are predicted to reach (so optimal and every_k
# are compared at the same memory) and halfway between the higher of them and none's peak. DTR at a
# budget below the least it meets is left out (its run would be refused).
#
# Prints a table, measured against predicted activation peaks, then one line per policy:
#   RESULT recompute config=<config> policy=<name> step_ratio=<÷ none's> activation_ratio=<÷ none's>
# and a PROBLEM line (and exit status 3) for any run whose peak differs from the prediction or
# exceeds its budget.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="${BUILD_DIR:-$ROOT/build/bench}"
CONFIGS="${CONFIGS:-tiny gpt2-124M}"
RESULTS="${RESULTS:-$BUILD_DIR/recompute.jsonl}"
SVG="${SVG:-$BUILD_DIR/recompute.svg}"
PYTHON=/usr/bin/python3
THREADS=2
export OMP_NUM_THREADS=$THREADS OPENBLAS_NUM_THREADS=$THREADS

# Per config: "model flags|warmup steps rounds other-k".
config_args() {
  case "$1" in
    tiny) echo "--layers 4 --embd 256 --heads 4 --vocab 256 --seq 128 --batch 8|2 10 5 3" ;;
    # A 124M step costs seconds on two cores: B = 2, one warmup step and three timed ones. Its
    # head's logits set the peak of every k up to 4, so the other k is one whose segments do.
    gpt2-124M) echo "--gpt2-124m --seq 256 --batch 2|1 3 3 6" ;;
    *) echo "unknown config '$1' (known: tiny gpt2-124M)" >&2; exit 2 ;;
  esac
}
read -ra CONFIG_LIST <<<"$CONFIGS"
for c in "${CONFIG_LIST[@]}"; do config_args "$c" >/dev/null; done

echo "== building (Release) in $BUILD_DIR"
if [[ ! -f $BUILD_DIR/CMakeCache.txt ]]; then
  cmake -S "$ROOT" -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTESSERA_BUILD_BENCH=ON \
    -DTESSERA_BUILD_TESTS=OFF >/dev/null
fi
cmake --build "$BUILD_DIR" --target recompute_bench >/dev/null
BENCH="$BUILD_DIR/bench/recompute_bench"

mkdir -p "$(dirname "$RESULTS")"
: >"$RESULTS"
echo "== $(date -u '+%Y-%m-%d %H:%M UTC'), $(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc) cores, $THREADS threads, /proc/loadavg: $(cat /proc/loadavg)"
# Busy: other runnable processes in most of ten samples over a second (the sampler counts itself).
if $PYTHON -c "
import statistics, sys, time
runnable = []
for _ in range(10):
    runnable.append(int(open('/proc/loadavg').read().split()[3].split('/')[0]) - 1)
    time.sleep(0.1)
sys.exit(statistics.median(runnable) < 1)"; then
  echo "   warning: the machine is busy; other processes competing for the cores make every policy slower and noisier"
fi

# Tags a run's JSON line (its last line) with the config and round and keeps it.
record() {
  local config=$1 round=$2 output=$3 load=$4
  tail -n 1 <<<"$output" | $PYTHON -c "import json,sys; d=json.loads(sys.stdin.read()); d.update(config='$config', round=$round, loadavg_before='$load'); print(json.dumps(d))" >>"$RESULTS"
}

for config in "${CONFIG_LIST[@]}"; do
  IFS='|' read -r flags rest <<<"$(config_args "$config")"
  read -ra model_args <<<"$flags"
  read -r W S R K2 <<<"$rest"
  R="${ROUNDS:-$R}"
  args=("${model_args[@]}" --threads "$THREADS")

  # The budgets come from the predicted peaks, so optimal meets every_k at the same memory.
  prediction=$("$BENCH" "${args[@]}" --predict "none,full,every_k,every_k:$K2,selective")
  echo "== $config: ${model_args[*]}, $W warmup + $S timed steps, $R rounds"
  sed '$d' <<<"$prediction" | sed 's/^/   /'
  tail -n 1 <<<"$prediction" | $PYTHON -c "import json,sys; d=json.loads(sys.stdin.read()); d.update(config='$config'); print(json.dumps(d))" >>"$RESULTS"
  read -r b1 b2 b3 <<<"$(tail -n 1 <<<"$prediction" | $PYTHON -c "
import json, sys
p = json.loads(sys.stdin.read())['predicted']
print(p['every_k'], p['every_k:$K2'], (max(p['every_k'], p['every_k:$K2']) + p['none']) // 2)")"
  policies=(none full every_k "every_k:$K2" selective "optimal:$b1" "optimal:$b2" "optimal:$b3")
  for b in "$b1" "$b2" "$b3"; do
    if "$BENCH" "${args[@]}" --predict "dtr:$b" >/dev/null 2>&1; then policies+=("dtr:$b"); fi
  done

  for ((r = 0; r < R; r++)); do
    n=${#policies[@]}
    for ((i = 0; i < n; i++)); do
      policy=${policies[$(((i + r) % n))]}
      rc=0
      load=$(cut -d' ' -f1-3 /proc/loadavg)
      output=$("$BENCH" "${args[@]}" --warmup "$W" --steps "$S" --policy "$policy" 2>&1) || rc=$?
      if [[ -z $output ]] || ! tail -n 1 <<<"$output" | grep -q '^{'; then
        echo "$output" >&2
        echo "recompute_bench --policy $policy failed (exit $rc)" >&2
        exit 1
      fi
      sed '$d' <<<"$output" | sed "s/^/   r$r [load $load] /"
      record "$config" "$r" "$output" "$load"
    done
  done
done
echo "== /proc/loadavg at the end: $(cat /proc/loadavg); every run in $RESULTS"

SUMMARY="${RESULTS%.jsonl}_summary.json"
status=0
$PYTHON - "$RESULTS" "$SUMMARY" "${CONFIG_LIST[@]}" <<'EOF' || status=$?
import json, statistics, sys

path, summary_path, configs = sys.argv[1], sys.argv[2], sys.argv[3:]
rows = [json.loads(line) for line in open(path) if line.strip()]
MiB = 1 << 20
summary, results, problems = {"configs": {}}, [], []
for config in configs:
    runs = [r for r in rows if r.get("config") == config and r.get("bench") == "recompute"]
    names = list(dict.fromkeys(r["policy"] for r in runs))
    med = {}
    for name in names:
        rs = [r for r in runs if r["policy"] == name]
        m = {k: statistics.median(r[k] for r in rs) for k in
             ("ms_per_step", "forward_ms", "recompute_ms", "backward_ms", "optimizer_ms", "model_time_ratio")}
        m["runs"] = len(rs)
        times = [r["ms_per_step"] for r in rs]
        m["spread"] = (max(times) - min(times)) / m["ms_per_step"]
        # Optimal plans with the unit times it measures when the engine starts, so its schedule,
        # and with it the peak, may differ from run to run; each run is held to its own prediction.
        m["peaks"] = sorted({r["activation_peak"] for r in rs})
        m["peak"] = statistics.median_low(r["activation_peak"] for r in rs)
        m["predicted"] = statistics.median_low(r["predicted_peak"] for r in rs)
        m["mismatches"] = [(r["round"], r["activation_peak_min"], r["activation_peak"], r["predicted_peak"])
                           for r in rs if not r["measured_equals_predicted"]]
        m["budget"] = rs[0]["budget_bytes"]
        m["recomputed_forwards"] = rs[0]["recomputed_forwards"]
        m["last_losses"] = sorted({r["losses"][-1] for r in rs})
        med[name] = m
    r0 = runs[0]
    none = med["none"]
    print(f"\n{config}: L={r0['L']} C={r0['C']} H={r0['H']} T={r0['T']} B={r0['B']} V={r0['V']}, "
          f"{r0['params']:,} parameters, {r0['warmup']} warmup + {r0['steps']} timed steps per run; "
          "ms are medians over rounds of each run's median step")
    print(f"{'policy':14s} {'runs':>4s} {'ms/step':>9s} {'spread':>6s} {'fwd':>8s} {'recomp':>8s} {'bwd':>8s} {'opt':>7s} "
          f"{'act MiB':>9s} {'pred MiB':>9s} {'step ratio':>10s} {'act ratio':>9s} {'FLOP model':>10s}")
    summary["configs"][config] = {}
    for name, m in med.items():
        step_ratio = m["ms_per_step"] / none["ms_per_step"]
        act_ratio = m["peak"] / none["peak"]
        m["step_ratio"], m["activation_ratio"] = step_ratio, act_ratio
        print(f"{name:14s} {m['runs']:4d} {m['ms_per_step']:9.1f} {m['spread']:6.2f} {m['forward_ms']:8.1f} {m['recompute_ms']:8.1f} "
              f"{m['backward_ms']:8.1f} {m['optimizer_ms']:7.1f} {m['peak'] / MiB:9.2f} {m['predicted'] / MiB:9.2f} "
              f"{step_ratio:10.3f} {act_ratio:9.3f} {m['model_time_ratio']:10.3f}")
        summary["configs"][config][name] = {k: m[k] for k in (
            "step_ratio", "activation_ratio", "ms_per_step", "forward_ms", "recompute_ms", "backward_ms",
            "optimizer_ms", "peak", "peaks", "predicted", "budget", "recomputed_forwards", "model_time_ratio", "runs",
            "spread")}
        results.append((config, name, step_ratio, act_ratio))

    print(f"\n{config}: measured vs predicted activation peaks (each run: every step, warmup included, against the "
          "engine's prediction for that run's plan)")
    for name, m in med.items():
        peaks = ", ".join(f"{p} ({p / MiB:.2f} MiB)" for p in m["peaks"])
        plans = f"; {len(m['peaks'])} different plans over the runs" if len(m["peaks"]) > 1 else ""
        verdict = "equal in every run" if not m["mismatches"] else f"NOT EQUAL in {len(m['mismatches'])} runs"
        print(f"   {name:14s} measured {peaks} bytes{plans}: {verdict}")
        for rnd, lo, hi, pred in m["mismatches"]:
            problems.append(f"{config} {name} round {rnd}: measured activation peaks {lo}..{hi} != predicted {pred}")
        if m["budget"] and max(m["peaks"]) > m["budget"]:
            problems.append(f"{config} {name}: activation peak {max(m['peaks'])} above the budget {m['budget']}")
    losses = sorted({l for m in med.values() for l in m["last_losses"]})
    print(f"   last loss of every run: {'identical' if len(losses) == 1 else 'differs'} "
          f"({', '.join(f'{l:.9g}' for l in losses)})")

    full = med.get("full")
    if full:
        extra = full["ms_per_step"] - none["ms_per_step"]
        print(f"\n{config}: full costs {extra:.1f} ms more than none = {extra / none['forward_ms']:.2f} × none's forward "
              f"({none['forward_ms']:.1f} ms, head and loss included); its recomputation itself takes "
              f"{full['recompute_ms']:.1f} ms; backward ≈ {none['backward_ms'] / none['forward_ms']:.2f} × forward")
    # The every-k family (none, every_k at each k, full) is what a user gets without the solver;
    # at a budget, the fastest of its members that fit is what optimal must match or beat.
    family = {n: m for n, m in med.items() if n in ("none", "full") or n.startswith("every_k")}
    for name, m in med.items():
        if not name.startswith(("optimal", "dtr")):
            continue
        fits = [(f["ms_per_step"], n) for n, f in family.items() if f["peak"] <= m["budget"]]
        if not fits:
            print(f"   {name}: no every-k point fits its budget")
            continue
        best_ms, best = min(fits)
        verdict = "on or below" if m["ms_per_step"] <= best_ms * 1.02 else "ABOVE"
        print(f"   {name}: {m['ms_per_step']:.1f} ms at {m['peak'] / MiB:.2f} MiB vs {best} {best_ms:.1f} ms at "
              f"{family[best]['peak'] / MiB:.2f} MiB (the fastest every-k point within the budget): "
              f"{m['ms_per_step'] / best_ms:.3f}, {verdict} the every-k curve (2% noise allowance)")

json.dump(summary, open(summary_path, "w"), indent=1)
print()
for config, name, step_ratio, act_ratio in results:
    print(f"RESULT recompute config={config} policy={name} step_ratio={step_ratio:.3f} activation_ratio={act_ratio:.3f}")
for p in problems:
    print(f"PROBLEM {p}")
sys.exit(3 if problems else 0)
EOF
# A failed check still draws the chart: the numbers are worth seeing next to the message.
if [[ -f $SUMMARY ]]; then
  "$BENCH" --chart "$SUMMARY" --svg "$SVG"
  echo "== chart: $SVG"
fi
exit "$status"
