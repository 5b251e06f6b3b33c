#!/usr/bin/env bash
# Trains every configuration of the compatibility matrix's covering array (docs/compatibility.md,
# "Covering array") through the program, each against its one-process reference, and prints one
# line per configuration, a summary and the time taken. scripts/test.sh runs the CI subset only
# (ctest train_covering_array_ci). Exits non-zero when any configuration fails.
# Usage: scripts/matrix.sh [preset] [configuration id...]   (preset: release | debug | asan)
set -euo pipefail
cd "$(dirname "$0")/.."

preset="${1:-release}"
shift || true
which=("$@")
if [ ${#which[@]} -eq 0 ]; then
  which=(all)
fi

cmake --preset "$preset" -G Ninja > /dev/null
cmake --build --preset "$preset" -j "$(nproc)" --target tessera covering_array_run
start=$SECONDS
status=0
"build/$preset/tests/train/covering_array_run" "${which[@]}" || status=$?
echo "matrix: $((SECONDS - start)) s on $(nproc) cores"
exit "$status"
