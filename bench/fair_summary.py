#!/usr/bin/python3
"""The tables and RESULT lines of bench/vs_pytorch.sh and bench/precision.sh, from the JSON lines
of their runs, under the rules of bench/fairness.py (the ceiling per precision, no ratio against a
peer whose GEMM ran below half of the machine's best, no MFU above 1).

  fair_summary.py vs_pytorch RESULTS.jsonl --threads 2 --peer-coretype SkylakeX tiny gpt2-124M
  fair_summary.py precision RESULTS.jsonl --threads 2 --peer-coretype SkylakeX tiny gpt2-124M
"""
import argparse
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fairness  # noqa: E402


def flops_per_token(r):
    """Model FLOPs per token: 6N + 12 L C T (N = parameter count, tied embeddings, with positions)."""
    return 6 * r["params"] + 12 * r["L"] * r["C"] * r["T"]


def medians(runs):
    def med(key):
        return statistics.median(r[key] for r in runs)
    r0 = runs[0]
    return {
        # The GEMM rate is the best a contender reached over its runs, as the ceilings are the best measured.
        "runs": len(runs), "tok": med("tokens_per_s"), "ms": med("ms_per_step"), "gemm": max(r["gemm_gflops"] for r in runs),
        "n": r0["params"], "flops": flops_per_token(r0), "library": r0["gemm_library"], "core": r0["openblas_core"],
        "shape": r0["gemm_shape"], "act": r0.get("activation_peak_mib"),
        "shares": "/".join(f"{100 * med(k):.0f}" for k in ("forward_share", "backward_share", "optimizer_share")),
    }


def print_ceilings(rows):
    for r in rows:
        if r.get("bench") == "sgemm_ceiling":
            print(f"GEMM ceiling run ({r['threads']} threads, best of {r['reps']}, OpenBLAS core {r['openblas_core']}, "
                  f"bf16 by {r['bf16_impl']}): " + ", ".join(f"{k} {v:.1f}" for k, v in r["by_library"].items())
                  + " GFLOP/s")


def library_text(m):
    """The GEMM library, and the OpenBLAS core where the library is not OpenBLAS itself."""
    return m["library"] if m["library"].startswith("OpenBLAS") else f"{m['library']} (OpenBLAS core {m['core']})"


def mfu_text(value):
    return f"{value:6.3f}" if value is not None else f"{'-':>6s}"


def vs_pytorch(rows, configs, threads, coretype):
    print_ceilings(rows)
    print("model FLOPs per token = 6*N + 12*L*C*T (N = parameter count, tied embeddings, with position embeddings)\n")
    print(f"{'config':10s} {'impl':8s} {'runs':>4s} {'N':>11s} {'FLOP/token':>11s} {'tok/s':>9s} {'ms/step':>9s} "
          f"{'fwd/bwd/opt %':>14s} {'GEMM GF/s':>10s} {'MFU':>6s}  GEMM library")
    lines = []
    for config in configs:
        med = {}
        for impl in ("tessera", "pytorch"):
            runs = [r for r in rows if r.get("config") == config and r.get("impl") == impl and not r.get("probe")]
            if not runs:
                sys.exit(f"no {impl} runs recorded for {config}")
            med[impl] = medians(runs)
        t, p = med["tessera"], med["pytorch"]
        if t["n"] != p["n"]:
            sys.exit(f"{config}: parameter counts differ (tessera {t['n']}, pytorch {p['n']}): the two models are not the same")
        c = fairness.ceilings(rows, t["shape"])["fp32"]
        (ceiling_source, ceiling), (shape_source, at_shape) = c["overall"], c["at_shape"]
        for impl, m in med.items():
            mfu, _ = fairness.judge_mfu("mfu", m["tok"] * m["flops"], ceiling, ceiling_source, "fp32")
            print(f"{config:10s} {impl:8s} {m['runs']:4d} {m['n']:11d} {m['flops'] / 1e6:10.1f}M {m['tok']:9.1f} "
                  f"{m['ms']:9.1f} {m['shares']:>14s} {m['gemm']:10.1f} {mfu_text(mfu)}  {library_text(m)}")
        print(f"{'':10s} fp32 ceiling {ceiling:.1f} GFLOP/s ({ceiling_source}); best at {t['shape']}: {at_shape:.1f} "
              f"({shape_source})")
        ratio, why_ratio = fairness.judge_ratio("ratio", t["tok"], p["tok"], p["gemm"], at_shape, shape_source, "fp32")
        mfu, why_mfu = fairness.judge_mfu("mfu", t["tok"] * t["flops"], ceiling, ceiling_source, "fp32")
        lines += [f"{config}: {w}" for w in (why_ratio, why_mfu) if w]
        lines.append(fairness.result_line(config, [
            ("ratio", ratio), ("mfu", mfu), ("peer_coretype", coretype), ("peer_core", p["core"]),
            ("peer_gemm_gflops", f"{p['gemm']:.1f}"), ("tessera_gemm_gflops", f"{t['gemm']:.1f}"),
            ("ceiling_gflops", f"{ceiling:.1f}"), ("best_at_shape_gflops", f"{at_shape:.1f}"), ("threads", threads)]))
    print()
    print("\n".join(lines))


def precision(rows, configs, threads, coretype):
    print_ceilings(rows)
    print(f"\n{'config':10s} {'contender':14s} {'runs':>4s} {'tok/s':>9s} {'ms/step':>9s} {'activations MiB':>16s} "
          f"{'GEMM GF/s':>10s} {'MFU':>6s}  GEMM library")
    lines = []
    for config in configs:
        med = {}
        for contender in ("tessera-fp32", "tessera-bf16", "pytorch-bf16"):
            runs = [r for r in rows if r.get("config") == config and r.get("contender") == contender]
            if not runs:
                sys.exit(f"no {contender} runs recorded for {config}")
            med[contender] = medians(runs)
        shape = med["tessera-bf16"]["shape"]
        c = fairness.ceilings(rows, shape)
        for contender, m in med.items():
            prec = "fp32" if contender.endswith("fp32") else "bf16"
            src, ceil = c[prec]["overall"]
            mfu, _ = fairness.judge_mfu("mfu", m["tok"] * m["flops"], ceil, src, prec)
            act = f"{m['act']:16.1f}" if m["act"] is not None else f"{'-':>16s}"
            print(f"{config:10s} {contender:14s} {m['runs']:4d} {m['tok']:9.1f} {m['ms']:9.1f} {act} {m['gemm']:10.1f} "
                  f"{mfu_text(mfu)}  {library_text(m)}")
        for prec in ("fp32", "bf16"):
            (src, ceil), (ssrc, at) = c[prec]["overall"], c[prec]["at_shape"]
            print(f"{'':10s} {prec} ceiling {ceil:.1f} GFLOP/s ({src}); best at {shape}: {at:.1f} ({ssrc})")
        t32, t16, p16 = med["tessera-fp32"], med["tessera-bf16"], med["pytorch-bf16"]
        (src, ceil), (ssrc, at) = c["bf16"]["overall"], c["bf16"]["at_shape"]
        vs, why_vs = fairness.judge_ratio("vs_pytorch_bf16", t16["tok"], p16["tok"], p16["gemm"], at, ssrc, "bf16")
        mfu, why_mfu = fairness.judge_mfu("mfu_bf16", t16["tok"] * t16["flops"], ceil, src, "bf16")
        act = t16["act"] / t32["act"] if t16["act"] and t32["act"] else None
        lines += [f"{config}: {w}" for w in (why_vs, why_mfu) if w]
        lines.append(fairness.result_line(f"precision config={config}", [
            ("bf16_speedup", t16["tok"] / t32["tok"]), ("vs_pytorch_bf16", vs), ("mfu_bf16", mfu),
            ("activation_ratio", act), ("peer_coretype", coretype), ("peer_gemm_gflops_bf16", f"{p16['gemm']:.1f}"),
            ("tessera_gemm_gflops_bf16", f"{t16['gemm']:.1f}"), ("bf16_ceiling_gflops", f"{ceil:.1f}"),
            ("bf16_best_at_shape_gflops", f"{at:.1f}"), ("threads", threads)]))
    print()
    print("\n".join(lines))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("bench", choices=["vs_pytorch", "precision"])
    parser.add_argument("results")
    parser.add_argument("configs", nargs="+")
    parser.add_argument("--threads", default="2")
    parser.add_argument("--peer-coretype", default="unset")
    args = parser.parse_args()
    rows = [json.loads(line) for line in open(args.results) if line.strip()]
    # Each side on the same thread count: PyTorch's intra-op threads and its OpenBLAS's.
    for r in rows:
        for key in ("threads", "torch_threads", "openblas_threads"):
            if key in r and r.get("bench") != "sgemm_ceiling" and str(r[key]) != str(args.threads):
                sys.exit(f"a {r.get('impl', '?')} run had {key}={r[key]}, not the {args.threads} threads of the "
                         "comparison: the sides are not on equal terms")
    (vs_pytorch if args.bench == "vs_pytorch" else precision)(rows, args.configs, args.threads, args.peer_coretype)
    return 0


if __name__ == "__main__":
    sys.exit(main())
