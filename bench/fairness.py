"""The rules that keep bench/vs_pytorch.sh and bench/precision.sh honest, as pure functions
(tested by tests/bench/test_fairness.py):

- The ceiling of a precision is the best GEMM rate measured on this machine in that precision, by
  any library, at any shape measured (sgemm_ceiling's square sizes and the model's main product,
  and each contender's own matmul at that product).
- A ratio against a peer is printed only when the peer's GEMM ran at least at half the machine's
  best rate at the same shape (the model's main product): below that the peer ran a slower GEMM
  library or core than the machine offers, and the ratio would measure that, not the training step.
- MFU is model FLOP/s over the ceiling, and never above 1: a value above 1 means the ceiling was not
  the machine's real one, and is reported as such instead of printed.
"""

# A peer whose GEMM runs below this fraction of the machine's best is not given its best.
PEER_GEMM_FLOOR = 0.5


def best_rate(rates):
    """The highest of the (source, GFLOP/s) pairs with a positive rate: (source, GFLOP/s), or
    (None, 0.0) when none is positive."""
    positive = [(source, rate) for source, rate in rates if rate and rate > 0]
    if not positive:
        return None, 0.0
    return max(positive, key=lambda pair: pair[1])


def judge_ratio(name, tessera_tok_s, peer_tok_s, peer_gemm_gflops, best_gemm_gflops, best_source, precision):
    """(ratio or None, reason): tessera's tokens/s over the peer's, or None with the reason why the
    ratio is not fair to print."""
    if not peer_tok_s or peer_tok_s <= 0:
        return None, f"no {name}: the peer has no throughput"
    if not best_gemm_gflops or best_gemm_gflops <= 0:
        return None, f"no {name}: no {precision} GEMM rate of this machine was measured"
    if peer_gemm_gflops is None or peer_gemm_gflops < PEER_GEMM_FLOOR * best_gemm_gflops:
        peer = "unmeasured" if peer_gemm_gflops is None else f"{peer_gemm_gflops:.1f} GFLOP/s"
        return None, (f"no {name}: the peer's {precision} GEMM ran at {peer}, below "
                      f"{PEER_GEMM_FLOOR:g} of the machine's best at the same shape ({best_gemm_gflops:.1f} "
                      f"GFLOP/s, {best_source}); the ratio would measure its GEMM library, not its training step")
    return tessera_tok_s / peer_tok_s, ""


def judge_mfu(name, model_flops_per_s, ceiling_gflops, ceiling_source, precision):
    """(mfu or None, reason): model FLOP/s over the precision's ceiling, or None with the reason."""
    if not ceiling_gflops or ceiling_gflops <= 0:
        return None, f"no {name}: no {precision} GEMM ceiling was measured"
    mfu = model_flops_per_s / (ceiling_gflops * 1e9)
    if mfu > 1:
        return None, (f"no {name}: it came out at {mfu:.3f}, above 1, so the {precision} ceiling "
                      f"({ceiling_gflops:.1f} GFLOP/s, {ceiling_source}) is not this machine's real one")
    return mfu, ""


def result_line(head, fields):
    """'RESULT <head> k=v ...' with the fields whose value is not None (floats to 3 decimals)."""
    parts = [f"RESULT {head}"]
    for key, value in fields:
        if value is None:
            continue
        parts.append(f"{key}={value:.3f}" if isinstance(value, float) else f"{key}={value}")
    return " ".join(parts)


def ceilings(rows, shape):
    """From the JSON rows of a run (sgemm_ceiling's and each contender's), per precision: the best
    rate overall (for MFU) and the best at `shape` (for the peer's floor), each as (source, GFLOP/s).
    Returns {"fp32": {"overall": ..., "at_shape": ...}, "bf16": {...}}."""
    overall = {"fp32": [], "bf16": []}
    at_shape = {"fp32": [], "bf16": []}
    for row in rows:
        if row.get("bench") == "sgemm_ceiling":
            core = row.get("openblas_core", "?")
            for key, rate in row.get("by_shape", {}).items():
                library, row_shape = key.split(" ")
                precision = "bf16" if library.startswith("bf16") else "fp32"
                source = f"{library}{' core ' + core if library.startswith('openblas') else ''} at {row_shape}"
                overall[precision].append((source, rate))
                if row_shape == shape:
                    at_shape[precision].append((source, rate))
        elif "gemm_gflops" in row and row.get("gemm_shape") == shape:
            precision = row.get("gemm_precision") or ("bf16" if row.get("precision") in ("bf16", "fp16") else "fp32")
            if row.get("precision") == "fp16":
                continue  # an f16 product is not a bf16 one
            source = f"{row.get('impl', '?')}'s {row.get('gemm_library', '?')} at {shape}"
            overall[precision].append((source, row["gemm_gflops"]))
            at_shape[precision].append((source, row["gemm_gflops"]))
    return {p: {"overall": best_rate(overall[p]), "at_shape": best_rate(at_shape[p])} for p in overall}
