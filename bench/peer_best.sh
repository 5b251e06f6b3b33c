# Sourced by bench/vs_pytorch.sh and bench/precision.sh: gives PyTorch its best OpenBLAS core on
# this machine. Debian's OpenBLAS 0.3.21 picks its kernels by CPU model; on a CPU it does not know it
# runs generic ones, and an OPENBLAS_CORETYPE inherited from the environment may name a core slower
# than the CPU allows. PyTorch's fp32 products run on that OpenBLAS (its bf16 ones on oneDNN,
# whatever the core), so the core is chosen by measurement: every candidate the CPU's flags allow
# (OpenBLAS's own choice with OPENBLAS_CORETYPE unset, the inherited value, SkylakeX and Cooperlake
# with AVX-512, Haswell and Zen with AVX2), each timed three times, interleaved, on PyTorch's fp32 matmul
# at the model's main product; the fastest is exported for every PyTorch run after it.
#
#   choose_openblas_coretype PYTHON TORCH_TRAIN_PY RESULTS ARGS...   (ARGS: torch_train.py's model args)
#
# Sets PEER_CORETYPE (the OPENBLAS_CORETYPE chosen, "" for unset), exports or unsets
# OPENBLAS_CORETYPE, and appends the chosen probe's JSON line (tagged probe=true) to RESULTS.

# The model's main product of a config (the MLP's first linear: B*T x 4C x C), where the GEMM rates
# are compared; config_args is the sourcing script's.
config_shape() {
  local L C H T B V W S
  read -r L C H T B V W S <<<"$(config_args "$1")"
  echo "$((B * T))x$((4 * C))x$C"
}

openblas_coretype_candidates() {
  local candidates=("" "${OPENBLAS_CORETYPE:-}")
  if grep -qw avx512f /proc/cpuinfo; then candidates+=(SkylakeX); fi
  if grep -qw avx512_bf16 /proc/cpuinfo; then candidates+=(Cooperlake); fi
  if grep -qw avx2 /proc/cpuinfo; then candidates+=(Haswell Zen); fi
  # Unique, in order ("" stands for OPENBLAS_CORETYPE unset).
  local seen=" " c
  for c in "${candidates[@]}"; do
    [[ $seen == *" [$c] "* ]] && continue
    seen+="[$c] "
    printf '%s\n' "$c"
  done
}

choose_openblas_coretype() {
  local python=$1 script=$2 results=$3
  shift 3
  local -a candidates
  mapfile -t candidates < <(openblas_coretype_candidates)
  local inherited="${OPENBLAS_CORETYPE:-}"
  local best_rate=0 best_core="" best_line="" round c line rate
  declare -A rate_of=() core_of=()
  echo "== PyTorch's OpenBLAS core: fp32 matmul at the model's main product for each candidate, 3 rounds interleaved"
  echo "   (OPENBLAS_CORETYPE in the environment: ${inherited:-unset})"
  for round in 1 2 3; do
    for c in "${candidates[@]}"; do
      if [[ -z $c ]]; then
        line=$(env -u OPENBLAS_CORETYPE "$python" "$script" "$@" --gemm-only | tail -n 1)
      else
        line=$(OPENBLAS_CORETYPE=$c "$python" "$script" "$@" --gemm-only | tail -n 1)
      fi
      rate=$(echo "$line" | "$python" -c "import json,sys; print(json.loads(sys.stdin.read())['gemm_gflops'])")
      core_of[${c:-unset}]=$(echo "$line" | "$python" -c "import json,sys; print(json.loads(sys.stdin.read())['openblas_core'])")
      if "$python" -c "import sys; sys.exit(not float('$rate') > float('${rate_of[${c:-unset}]:-0}'))"; then
        rate_of[${c:-unset}]=$rate
      fi
      if "$python" -c "import sys; sys.exit(not float('$rate') > float('$best_rate'))"; then
        best_rate=$rate best_core=$c best_line=$line
      fi
    done
  done
  for c in "${candidates[@]}"; do
    printf '   OPENBLAS_CORETYPE=%-11s core %-11s %8.1f GFLOP/s (best of 3)\n' "${c:-unset}" "${core_of[${c:-unset}]}" \
      "${rate_of[${c:-unset}]}"
  done
  PEER_CORETYPE=$best_core
  if [[ -z $best_core ]]; then unset OPENBLAS_CORETYPE; else export OPENBLAS_CORETYPE=$best_core; fi
  echo "   PyTorch runs with OPENBLAS_CORETYPE=${best_core:-unset} (core ${core_of[${best_core:-unset}]}, $best_rate GFLOP/s)"
  echo "$best_line" | "$python" -c "import json,sys; d=json.loads(sys.stdin.read()); d['probe']=True; print(json.dumps(d))" \
    >>"$results"
}

# What both benchmarks do before their runs: SHAPE_ARGS, the sgemm_ceiling options of every config's
# main product, and PyTorch's OpenBLAS core chosen at the last config's shape (the headline one).
# Reads the sourcing script's CONFIG_LIST, config_args, PYTHON, ROOT, RESULTS and THREADS.
prepare_fair_peer() {
  SHAPE_ARGS=()
  local c
  for c in "${CONFIG_LIST[@]}"; do SHAPE_ARGS+=(--shape "$(config_shape "$c")"); done
  local L C H T B V W S
  read -r L C H T B V W S <<<"$(config_args "${CONFIG_LIST[-1]}")"
  choose_openblas_coretype "$PYTHON" "$ROOT/bench/torch_train.py" "$RESULTS" --embd "$C" --seq "$T" --batch "$B" \
    --threads "$THREADS"
}
