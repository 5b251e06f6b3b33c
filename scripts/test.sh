#!/usr/bin/env bash
# Installs what is missing, builds (Release) and runs every test with ctest, then builds the
# libFuzzer targets and runs each for a few seconds (docs/fuzzing.md).
# Usage: scripts/test.sh [preset] [extra ctest arguments...]   (preset: release | debug | asan)
# TESSERA_FUZZ_SECONDS: seconds per fuzz target (default 10; 0 skips the fuzz run).
set -euo pipefail
cd "$(dirname "$0")/.."

preset="${1:-release}"
shift || true

scripts/install-deps.sh
jobs="$(nproc)"
cmake --preset "$preset" -G Ninja
cmake --build --preset "$preset" -j "$jobs"
ctest --preset "$preset" -j "$jobs" "$@"

fuzz_seconds="${TESSERA_FUZZ_SECONDS:-10}"
if [ "$fuzz_seconds" != 0 ]; then
  scripts/fuzz.sh "$fuzz_seconds"
fi
