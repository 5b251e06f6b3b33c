#!/usr/bin/env bash
# The pipeline bubble, measured and simulated: p = 2 pipeline ranks under mpirun, one thread each,
# m = 4 and 8 microbatches, every synchronous schedule (GPipe, 1F1B, interleaved with v = 2,
# ZB-H1). Each run trains a GPT-2 (L = 8, C = 256, T = 128, one sequence per microbatch) through
# parallel::TrainingEngine, records every step's timeline, and compares each timed step's bubble
# with the simulator's for the same schedule fed that step's measured per-stage medians and p2p
# time (bench/pipeline_bubble.cpp; definitions in src/plan/pipeline/measured_run.h).
#
#   bench/pipeline_bubble.sh
#   MICROBATCHES="8" SCHEDULES="1f1b zb-h1" bench/pipeline_bubble.sh
#
# Environment: SCHEDULES (default "gpipe 1f1b interleaved zb-h1"), MICROBATCHES (default "4 8"),
# STEPS (timed steps per run, default 7), BUILD_DIR (default build/bench), OUT (timelines,
# pictures and JSON lines; default $BUILD_DIR/pipeline_bubble).
#
# Prints each run's steps and, per run, the line of its median step:
#   RESULT pipeline schedule=S p=P m=M v=V measured_bubble=X simulated_bubble=Y
# and writes that step's timeline (timeline_S_mM.json) and its picture beside its simulation
# (timeline_S_mM.svg, by `tessera simulate --timeline`) under $OUT.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="${BUILD_DIR:-$ROOT/build/bench}"
OUT="${OUT:-$BUILD_DIR/pipeline_bubble}"
SCHEDULES="${SCHEDULES:-gpipe 1f1b interleaved zb-h1}"
MICROBATCHES="${MICROBATCHES:-4 8}"
STEPS="${STEPS:-7}"
P=2

echo "== building (Release) in $BUILD_DIR"
if [[ ! -f $BUILD_DIR/CMakeCache.txt ]]; then
  cmake -S "$ROOT" -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTESSERA_BUILD_BENCH=ON \
    -DTESSERA_BUILD_TESTS=OFF >/dev/null
fi
cmake --build "$BUILD_DIR" --target pipeline_bubble tessera >/dev/null
BENCH="$BUILD_DIR/bench/pipeline_bubble"
TESSERA="$BUILD_DIR/src/cli/tessera"
mkdir -p "$OUT"
: >"$OUT/results.jsonl"

# One thread per rank, so the two ranks do not share a core; --bind-to none leaves each rank's
# progress thread free to run beside its compute (dist/launch.h).
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
MPIRUN=(mpirun -n "$P" --oversubscribe --bind-to none -x OMP_NUM_THREADS=1 -x OPENBLAS_NUM_THREADS=1)
echo "== $(date -u '+%Y-%m-%d %H:%M UTC'), $(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc) cores, /proc/loadavg: $(cat /proc/loadavg)"

results=()
for m in $MICROBATCHES; do
  for schedule in $SCHEDULES; do
    v=1
    [[ $schedule == interleaved ]] && v=2
    timeline="$OUT/timeline_${schedule}_m${m}.json"
    echo "== $schedule, p = $P, m = $m, v = $v"
    output=$("${MPIRUN[@]}" "$BENCH" --schedule "$schedule" --microbatches "$m" --chunks "$v" --steps "$STEPS" \
      --timeline-out "$timeline" 2>&1) || { echo "$output" >&2; echo "pipeline_bubble failed" >&2; exit 1; }
    grep -v '^{' <<<"$output" | grep -v '^RESULT' | sed 's/^/   /'
    grep '^{' <<<"$output" >>"$OUT/results.jsonl"
    results+=("$(grep '^RESULT' <<<"$output")")
    "$TESSERA" simulate --timeline "$timeline" --svg "${timeline%.json}.svg" >/dev/null
  done
done
echo "== /proc/loadavg at the end: $(cat /proc/loadavg); timelines and pictures in $OUT"
printf '%s\n' "${results[@]}"
