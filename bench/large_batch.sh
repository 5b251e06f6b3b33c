#!/usr/bin/env bash
# Large-batch training with LAMB: the same number of tokens of the King James Bible seen by AdamW
# at a small batch and by LAMB at K times that batch (K times fewer steps, the learning rate
# scaled by √K and warmed up over a fixed share of the steps), each from the same initial weights;
# the validation losses at the end compared. LAMB's per-tensor trust ratio is what lets the step
# grow with the batch (You et al. 2020).
#
#   bench/large_batch.sh
#   STEPS=480 SCALE=8 LAMB_BASE_LR=5e-3 bench/large_batch.sh
#
# Environment: STEPS (AdamW's steps at the small batch; default 960), BATCH (the small batch in
# sequences; default 8), SCALE (LAMB's batch multiple K; default 8), ADAMW_LR (default 2e-3),
# LAMB_BASE_LR (LAMB's rate at the small batch, before √K scaling; default 7.07e-3, so 0.02 at
# K = 8, the best of a sweep in docs/benchmarks.md), LAMB_WEIGHT_DECAY (LAMB's optim.weight_decay;
# default 0.1, the config's and AdamW's; LAMB adds it to the update before the trust ratio, so the
# same number does not decay the weights as AdamW's decoupled decay does), LAMB_UNADAPTED_LR_SCALE
# (LAMB's optim.unadapted_lr_scale: the norm gains and biases, which the trust ratio leaves out,
# step at LAMB's rate times this; default 0.1, the best of a sweep in docs/benchmarks.md;
# 1 gives them the matrices' rate, ten times AdamW's), WARMUP_SHARE (the share
# of each run's steps spent warming up; default 0.1), DATA (the prepared dataset; default data/kjv,
# prepared when missing), BUILD_DIR (default build/release), OUT (run folders; default
# $BUILD_DIR/large_batch), THREADS (threads per run; default 2, or 1 with TOGETHER=1), TOGETHER (1:
# run both at once, each on its own core, for a 2-core machine; the losses do not depend on it),
# EVALS (validation losses taken over each run, evenly spaced in tokens, so that both runs are
# measured at the same points; default 1: at the end only), RESUME (1: continue the runs in OUT
# from their latest checkpoints, bitwise as if never stopped, and leave a finished run as it is;
# refused when OUT's runs were started with other settings; default 0: start both runs over).
#
# Each run saves a checkpoint every 1/32 of its steps and on Ctrl-C or SIGTERM, so a long pair
# (eight epochs take hours here) can be stopped and continued with RESUME=1.
#
# Prints both runs' validation losses at each of the EVALS points, the last one's and
#   RESULT large_batch optimizer=lamb batch=<K·B> val_loss=… adamw_val_loss=… rel_diff=…
# where rel_diff = (lamb − adamw) / adamw; the goal is |rel_diff| ≤ 0.02.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="${BUILD_DIR:-$ROOT/build/release}"
OUT="${OUT:-$BUILD_DIR/large_batch}"
DATA="${DATA:-$ROOT/data/kjv}"
STEPS="${STEPS:-960}"
BATCH="${BATCH:-8}"
SCALE="${SCALE:-8}"
ADAMW_LR="${ADAMW_LR:-2e-3}"
LAMB_BASE_LR="${LAMB_BASE_LR:-7.07e-3}"
LAMB_WEIGHT_DECAY="${LAMB_WEIGHT_DECAY:-0.1}"
LAMB_UNADAPTED_LR_SCALE="${LAMB_UNADAPTED_LR_SCALE:-0.1}"
WARMUP_SHARE="${WARMUP_SHARE:-0.1}"
TOGETHER="${TOGETHER:-0}"
EVALS="${EVALS:-1}"
RESUME="${RESUME:-0}"
if [[ $TOGETHER == 1 ]]; then THREADS="${THREADS:-1}"; else THREADS="${THREADS:-2}"; fi
export OMP_NUM_THREADS=$THREADS OPENBLAS_NUM_THREADS=$THREADS

if (( STEPS % SCALE != 0 )); then
  echo "STEPS ($STEPS) must be a multiple of SCALE ($SCALE): both runs see the same number of tokens" >&2
  exit 2
fi
if ! [[ $EVALS =~ ^[1-9][0-9]*$ ]] || (( (STEPS / SCALE) % EVALS != 0 )); then
  echo "EVALS ($EVALS) must be a positive divisor of LAMB's steps ($((STEPS / SCALE))): both runs are measured at the same tokens" >&2
  exit 2
fi

if [[ $RESUME != 0 && $RESUME != 1 ]]; then
  echo "RESUME ($RESUME) must be 0 (start over) or 1 (continue the runs in $OUT)" >&2
  exit 2
fi

# What the losses depend on; a resumed pair must have been started with the same.
settings="STEPS=$STEPS BATCH=$BATCH SCALE=$SCALE ADAMW_LR=$ADAMW_LR LAMB_BASE_LR=$LAMB_BASE_LR"
settings+=" LAMB_WEIGHT_DECAY=$LAMB_WEIGHT_DECAY LAMB_UNADAPTED_LR_SCALE=$LAMB_UNADAPTED_LR_SCALE WARMUP_SHARE=$WARMUP_SHARE EVALS=$EVALS DATA=$DATA"
if [[ $RESUME == 1 && -f $OUT/settings ]] && [[ $(cat "$OUT/settings") != "$settings" ]]; then
  echo "RESUME=1: the runs in $OUT were started with" >&2
  echo "  $(cat "$OUT/settings")" >&2
  echo "not with" >&2
  echo "  $settings" >&2
  echo "continue them with their settings, or start over with RESUME=0 (or another OUT)" >&2
  exit 2
fi
if [[ $RESUME == 1 && ! -f $OUT/settings ]] && [[ -d $OUT/adamw || -d $OUT/lamb ]]; then
  echo "RESUME=1: $OUT holds runs without a record of their settings; start over with RESUME=0 (or another OUT)" >&2
  exit 2
fi

echo "== building tessera (Release) in $BUILD_DIR"
if [[ ! -f $BUILD_DIR/CMakeCache.txt ]]; then
  cmake -S "$ROOT" -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
fi
cmake --build "$BUILD_DIR" --target tessera >/dev/null
tessera="$BUILD_DIR/src/cli/tessera"

if [[ ! -f $DATA/data.json ]]; then
  echo "== preparing the King James Bible in $DATA"
  "$tessera" data prepare --input kjv --out "$DATA" --vocab-size 4096
fi

lamb_steps=$((STEPS / SCALE))
lamb_batch=$((BATCH * SCALE))
# awk for the arithmetic: bash has integers only.
lamb_lr=$(awk -v b="$LAMB_BASE_LR" -v k="$SCALE" 'BEGIN { printf "%.6g", b * sqrt(k) }')
warmup() { awk -v s="$1" -v f="$WARMUP_SHARE" 'BEGIN { w = int(s * f + 0.5); if (w < 1) w = 1; print w }'; }

# The default config's model and data; every sequence of a step in one microbatch of at most 16.
common=(--config "$ROOT/configs/default.toml" --data.dir "$DATA" --checkpoint.keep 2
        --train.eval_batches 32 --train.sample_tokens 0 --train.sample_every 0
        --log.progress plain --log.every 20 --log.peak_gflops 1000)
if [[ $RESUME == 1 ]]; then common+=(--checkpoint.resume auto); else common+=(--train.overwrite true); fi
checkpoint_every() { (( $1 >= 32 )) && echo $(($1 / 32)) || echo 1; }
micro() { local b=$1; (( b > 16 )) && echo 16 || echo "$b"; }
# 0 leaves the one evaluation the trainer always makes at the last step.
eval_every() { (( EVALS > 1 )) && echo $(($1 / EVALS)) || echo 0; }

run() {
  local name=$1; shift
  echo "== $name: $*"
  local started=$SECONDS rc=0
  # Appended: a resumed run's log continues the stopped one's.
  "$tessera" train "${common[@]}" --train.out_dir "$OUT/$name" "$@" >>"$OUT/$name.log" 2>&1 || rc=$?
  if (( rc == 3 )); then
    echo "the $name run stopped early with a checkpoint (log: $OUT/$name.log); continue with RESUME=1 and the same settings" >&2
    return 1
  elif (( rc != 0 )); then
    echo "the $name run failed; its output:" >&2; tail -n 30 "$OUT/$name.log" >&2; return 1
  fi
  echo "   $name: $((SECONDS - started)) s"
}

val_losses() {
  /usr/bin/python3 -c "
import json, sys
print(' '.join(repr(r['loss']) for r in map(json.loads, open(sys.argv[1])) if r.get('kind') == 'val'))" "$OUT/$1/metrics.jsonl"
}

mkdir -p "$OUT"
if [[ $RESUME == 0 ]]; then rm -f "$OUT/adamw.log" "$OUT/lamb.log"; fi
echo "$settings" >"$OUT/settings"
echo "== $(date -u '+%Y-%m-%d %H:%M UTC'), $(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc) cores, $THREADS threads, /proc/loadavg: $(cat /proc/loadavg)"
pids=()
run adamw --optim.name adamw --optim.lr "$ADAMW_LR" --optim.min_lr "$(awk -v l="$ADAMW_LR" 'BEGIN { print l / 10 }')" \
  --train.steps "$STEPS" --train.batch_size "$BATCH" --train.micro_batch_size "$(micro "$BATCH")" \
  --optim.warmup_steps "$(warmup "$STEPS")" --train.eval_every "$(eval_every "$STEPS")" \
  --checkpoint.every "$(checkpoint_every "$STEPS")" &
pids+=($!)
[[ $TOGETHER == 1 ]] || { wait "${pids[0]}" || exit 1; pids=(); }
run lamb --optim.name lamb --optim.lr "$lamb_lr" --optim.weight_decay "$LAMB_WEIGHT_DECAY" \
  --optim.unadapted_lr_scale "$LAMB_UNADAPTED_LR_SCALE" --optim.min_lr "$(awk -v l="$lamb_lr" 'BEGIN { print l / 10 }')" \
  --train.steps "$lamb_steps" --train.batch_size "$lamb_batch" --train.micro_batch_size "$(micro "$lamb_batch")" \
  --optim.warmup_steps "$(warmup "$lamb_steps")" --train.eval_every "$(eval_every "$lamb_steps")" \
  --checkpoint.every "$(checkpoint_every "$lamb_steps")" &
pids+=($!)
for pid in "${pids[@]}"; do wait "$pid" || exit 1; done

adamw_vals=($(val_losses adamw))
lamb_vals=($(val_losses lamb))
if (( ${#adamw_vals[@]} != EVALS || ${#lamb_vals[@]} != EVALS )); then
  echo "expected $EVALS validation losses per run, found ${#adamw_vals[@]} (adamw) and ${#lamb_vals[@]} (lamb)" >&2
  exit 1
fi
if (( EVALS > 1 )); then
  echo "validation loss at each share of the tokens:"
  for ((i = 0; i < EVALS; ++i)); do
    awk -v i=$((i + 1)) -v n="$EVALS" -v a="${adamw_vals[i]}" -v l="${lamb_vals[i]}" \
      'BEGIN { printf "  %d/%d: adamw %.4f  lamb %.4f  rel_diff %+.4f\n", i, n, a, l, (l - a) / a }'
  done
fi
adamw_val=${adamw_vals[EVALS - 1]}
lamb_val=${lamb_vals[EVALS - 1]}
rel=$(awk -v a="$adamw_val" -v l="$lamb_val" 'BEGIN { printf "%.4f", (l - a) / a }')
echo "adamw: batch $BATCH, $STEPS steps, lr $ADAMW_LR: val loss $adamw_val"
echo "lamb:  batch $lamb_batch, $lamb_steps steps, lr $lamb_lr (× $LAMB_UNADAPTED_LR_SCALE for norm gains and biases), weight decay $LAMB_WEIGHT_DECAY: val loss $lamb_val"
echo "RESULT large_batch optimizer=lamb batch=$lamb_batch val_loss=$lamb_val adamw_val_loss=$adamw_val rel_diff=$rel"
