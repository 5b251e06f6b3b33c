#!/usr/bin/env bash
# Builds the libFuzzer targets of tests/fuzz (the fuzz preset: clang with ASan and UBSan) and runs
# each for SECONDS (default 600). Any finding — a crash, a sanitizer report, an exception other
# than tessera::Error, a leak, an input slower than 10 s or an allocation over 2 GiB — stops the
# script with a non-zero exit; the input that caused it is written to build/fuzz-findings/.
# New inputs worth keeping land in build/fuzz-corpus/<target>/ (the checked-in seeds in
# tests/fuzz/corpus/<target>/ are only read); copy a useful one into the seeds by hand.
# Usage: scripts/fuzz.sh [SECONDS] [TARGET...]   (targets: fuzz_run_config fuzz_manifest
#        fuzz_safetensors fuzz_token_file fuzz_data_json fuzz_timeline_json; default all)
set -euo pipefail
cd "$(dirname "$0")/.."

seconds="${1:-600}"
shift || true
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  targets=(fuzz_run_config fuzz_manifest fuzz_safetensors fuzz_token_file fuzz_data_json fuzz_timeline_json)
fi

start=$SECONDS
cmake --preset fuzz -G Ninja > /dev/null
cmake --build --preset fuzz -j "$(nproc)"
echo "fuzz: targets built in $((SECONDS - start)) s"

mkdir -p build/fuzz-findings
status=0
for target in "${targets[@]}"; do
  scratch="build/fuzz-corpus/$target"
  mkdir -p "$scratch"
  echo "fuzz: $target for ${seconds} s"
  # The words each parser looks for, where a dictionary lists them.
  dict=()
  if [ -f "tests/fuzz/$target.dict" ]; then
    dict=(-dict="tests/fuzz/$target.dict")
  fi
  # The first corpus folder receives new inputs; the seeds are read after it.
  if ! build/fuzz/tests/fuzz/"$target" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
      -malloc_limit_mb=2048 -print_final_stats=1 -artifact_prefix="build/fuzz-findings/$target-" "${dict[@]}" \
      "$scratch" "tests/fuzz/corpus/$target" > "build/fuzz-findings/$target.log" 2>&1; then
    echo "fuzz: $target FOUND A PROBLEM (log: build/fuzz-findings/$target.log):"
    grep -E "ERROR|SUMMARY|Test unit written|terminate|what\(\)" "build/fuzz-findings/$target.log" | head -20 || true
    status=1
  else
    grep -E "stat::number_of_executed_units|cov: " "build/fuzz-findings/$target.log" | tail -2 | sed 's/^/  /'
  fi
done
echo "fuzz: ${#targets[@]} targets in $((SECONDS - start)) s, $([ "$status" = 0 ] && echo "no findings" || echo "FINDINGS")"
exit "$status"
