#!/usr/bin/env bash
# Runs a job that must fail, and checks how it fails:
#   expect_job_failure.sh <max whole seconds> <regex> -- <command...>
# Passes when the command exits non-zero within <max seconds>, its output matches <regex>
# (extended grep), and afterwards no process of the job remains. Every @MARKER@ in the command is
# replaced by a word unique to this run, which tags the job's processes for the orphan check.
set -u
max_seconds="$1"
regex="$2"
shift 2
[ "${1:-}" = "--" ] && shift

marker="tessera-job-${$}-${RANDOM}${RANDOM}"
cmd=()
for arg in "$@"; do cmd+=("${arg//@MARKER@/$marker}"); done

start_ns=$(date +%s%N)
output=$("${cmd[@]}" 2>&1)
rc=$?
elapsed_ms=$(( ($(date +%s%N) - start_ns) / 1000000 ))
printf '%s\n' "$output"
echo "---- exit status $rc after ${elapsed_ms} ms"

failed=0
if [ "$rc" -eq 0 ]; then
  echo "FAIL: the job exited 0; it should have failed"
  failed=1
fi
if [ "$elapsed_ms" -gt $((max_seconds * 1000)) ]; then
  echo "FAIL: the job took ${elapsed_ms} ms, more than ${max_seconds} s"
  failed=1
fi
if ! grep -Eq -- "$regex" <<<"$output"; then
  echo "FAIL: the output lacks /$regex/"
  failed=1
fi
# Processes of an ended job may take a moment to be reaped.
for _ in $(seq 50); do
  pgrep -f -- "$marker" >/dev/null || break
  sleep 0.1
done
if pgrep -f -- "$marker" >/dev/null; then
  echo "FAIL: processes of the job remain after it ended:"
  pgrep -a -f -- "$marker"
  pgrep -f -- "$marker" | while read -r pid; do kill -9 "$pid" 2>/dev/null; done
  failed=1
fi
[ "$failed" -eq 0 ] && echo "PASS: the job failed as expected"
exit "$failed"
