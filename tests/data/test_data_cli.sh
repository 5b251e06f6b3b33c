#!/usr/bin/env bash
# `tessera data` from the command line: bad input exits non-zero with a clear message; a small
# corpus prepares and checks; the King James Bible prepares where bible-kjv is installed.
# Usage: test_data_cli.sh path/to/tessera
set -u
tessera="$1"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
failures=0

# expect_failure "message part" args...: the command must exit non-zero and print the part.
expect_failure() {
  local part="$1"
  shift
  local output status
  output="$("$tessera" "$@" 2>&1)"
  status=$?
  if [ "$status" -eq 0 ]; then
    echo "FAIL: tessera $* exited 0; expected an error naming '$part'"
    failures=$((failures + 1))
  elif ! grep -qF -- "$part" <<<"$output"; then
    echo "FAIL: tessera $* failed but its message lacks '$part':"
    echo "$output"
    failures=$((failures + 1))
  else
    echo "ok: tessera $* -> exit $status, '$part'"
  fi
}

# expect_success args...: the command must exit 0.
expect_success() {
  local output
  if ! output="$("$tessera" "$@" 2>&1)"; then
    echo "FAIL: tessera $* failed:"
    echo "$output"
    failures=$((failures + 1))
  else
    echo "ok: tessera $*"
  fi
  last_output="$output"
}

# Bad input.
: >"$work/empty.txt"
expect_failure "is empty" data prepare --input "$work/empty.txt" --out "$work/o1"
expect_failure "does not exist" data prepare --input "$work/missing.txt" --out "$work/o1"
printf 'caf\xe9\n' >"$work/latin1.txt"
expect_failure "not valid UTF-8" data prepare --input "$work/latin1.txt" --out "$work/o1"
printf 'not a sentencepiece model' >"$work/bad.model"
for i in $(seq 1 200); do echo "the light was good and the evening and the morning were the day $i" >>"$work/small.txt"; done
expect_failure "corrupt" data prepare --input "$work/small.txt" --out "$work/o1" --tokenizer "$work/bad.model"
expect_failure "val-fraction" data prepare --input "$work/small.txt" --out "$work/o1" --val-fraction 0.9
# No validation tokens would fail only at `tessera train`, blamed on seq_len: refused at once.
expect_failure "--val-fraction must be above 0" data prepare --input "$work/small.txt" --out "$work/o1" --val-fraction 0
expect_failure "--val-fraction must be above 0" data prepare --input "$work/small.txt" --out "$work/o1" --val-fraction nan
# SentencePiece's own messages (its flags, its source lines) are said in tessera's terms.
expect_failure "--vocab-size 100000 is too large for" data prepare --input "$work/small.txt" --out "$work/o1" --vocab-size 100000
# 600 distinct CJK characters (U+4E00...), written as UTF-8 bytes whatever the locale.
for i in $(seq 0 599); do
  cp=$((0x4e00 + i))
  printf "\\$(printf '%03o' $((0xe0 | (cp >> 12))))\\$(printf '%03o' $((0x80 | ((cp >> 6) & 63))))\\$(printf '%03o' $((0x80 | (cp & 63))))"
  [ $((i % 40)) -eq 39 ] && echo
done >"$work/wide.txt"
expect_failure "--vocab-size 400 is too small for" data prepare --input "$work/wide.txt" --out "$work/o1" --vocab-size 400
if [ -e "$work/o1" ]; then echo "FAIL: a failed prepare left $work/o1 behind"; failures=$((failures + 1)); fi
expect_failure "excludes" data prepare --input "$work/small.txt" --out "$work/o1" --tokenizer "$work/bad.model" --vocab-size 300
printf 'garbage that is not a token file, long enough to hold a header? no.' >"$work/bad.bin"
expect_failure "truncated" data info "$work/bad.bin"

# A small corpus, end to end.
expect_success data prepare --input "$work/small.txt" --out "$work/small" --vocab-size 300 --val-fraction 0.1
grep -qF "training tokenizer" <<<"$last_output" || { echo "FAIL: no progress output"; failures=$((failures + 1)); }
# A dataset is not replaced by accident; --force replaces it.
expect_failure "already holds a dataset" data prepare --input "$work/small.txt" --out "$work/small" --vocab-size 300
expect_success data prepare --input "$work/small.txt" --out "$work/small" --vocab-size 300 --val-fraction 0.1 --force
expect_success data info "$work/small" --sample 20
grep -qF "the light was good" <<<"$last_output" || { echo "FAIL: info did not decode the sample"; failures=$((failures + 1)); }
cp "$work/small/val.bin" "$work/small/train.bin"
expect_failure "data.json says" data info "$work/small"

# The default corpus.
if command -v bible >/dev/null 2>&1; then
  expect_success data prepare --input kjv --out "$work/kjv" --vocab-size 4096
  echo "$last_output"
  expect_success data info "$work/kjv" --sample 12
  grep -qF "In the beginning God created" <<<"$last_output" || { echo "FAIL: KJV does not start with Genesis"; failures=$((failures + 1)); }
else
  echo "skip: the bible program (Debian bible-kjv) is not installed"
fi

if [ "$failures" -ne 0 ]; then
  echo "$failures failure(s)"
  exit 1
fi
echo "all passed"
