#!/usr/bin/env bash
# Installs what is missing, builds (Release) and runs every test with ctest.
# Usage: scripts/test.sh [preset] [extra ctest arguments...]   (preset: release | debug | asan)
set -euo pipefail
cd "$(dirname "$0")/.."

preset="${1:-release}"
shift || true

scripts/install-deps.sh
jobs="$(nproc)"
cmake --preset "$preset" -G Ninja
cmake --build --preset "$preset" -j "$jobs"
ctest --preset "$preset" -j "$jobs" "$@"
