#!/usr/bin/python3
"""PyTorch's training throughput on the model train_bench measures: GPT-2 style, fp32, tied
embeddings, biases, GELU (tanh), AdamW; the same steps (forward, backward, AdamW update, zeroed
gradients) on random tokens. The model code is tests/nn/torch_reference.py, the independent
implementation the parity test checks tessera against.

Prints a short line and, last, one JSON line with the fields train_bench prints, and the facts of
the GEMM library it ran: which library serves the precision compared (OpenBLAS and the core it
loaded for fp32, oneDNN and its implementation for bf16 autocast), its thread count, and the rate
of torch.matmul at the model's main product (the MLP's first linear: B*T x 4C x C) in that
precision, best of 5. With --gemm-only it prints those facts alone (bench/vs_pytorch.sh uses it to
choose OPENBLAS_CORETYPE).

  torch_train.py --layers 4 --embd 256 --heads 4 --seq 128 --batch 8 --vocab 256 --steps 10
  OPENBLAS_CORETYPE=SkylakeX torch_train.py --embd 768 --seq 256 --batch 4 --gemm-only
"""
import ctypes
import tempfile
import argparse
import importlib.util
import json
import os
import statistics
import sys
import time

import torch


def load_reference():
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "nn", "torch_reference.py")
    spec = importlib.util.spec_from_file_location("torch_reference", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def openblas_facts():
    """The OpenBLAS this process loaded (through PyTorch): its config string and the core it runs,
    from openblas_get_config() and openblas_get_corename() of the library in /proc/self/maps."""
    paths = sorted({line.split()[-1] for line in open("/proc/self/maps") if "libopenblas" in line})
    if not paths:
        return {"openblas": "none loaded", "openblas_core": "none"}
    lib = ctypes.CDLL(paths[0])
    lib.openblas_get_corename.restype = ctypes.c_char_p
    lib.openblas_get_config.restype = ctypes.c_char_p
    return {"openblas": lib.openblas_get_config().decode(), "openblas_core": lib.openblas_get_corename().decode(),
            "openblas_threads": lib.openblas_get_num_threads()}


def onednn_matmul_impl(a, b):
    """oneDNN's implementation of a @ b ("brg:avx512_core_bf16"), from its verbose line, or "" when
    the product did not run on oneDNN. The verbose output goes to file descriptor 1, caught here."""
    sys.stdout.flush()
    saved = os.dup(1)
    with tempfile.TemporaryFile(mode="w+") as f:
        os.dup2(f.fileno(), 1)
        try:
            with torch.backends.mkldnn.verbose(torch.backends.mkldnn.VERBOSE_ON):
                torch.matmul(a, b)
        finally:
            sys.stdout.flush()
            os.dup2(saved, 1)
            os.close(saved)
        f.seek(0)
        for line in f:
            parts = line.split(",")
            if line.startswith(("onednn_verbose,exec", "dnnl_verbose,exec")) and len(parts) > 4:
                return parts[4]
    return ""


def gemm_facts(M, N, K, precision, reps=5):
    """Which library runs PyTorch's matmul in `precision` (fp32 or bf16) and its best GFLOP/s at
    out[M,N] = a[M,K] @ b[K,N], after one warm-up."""
    dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    gen = torch.Generator().manual_seed(3)
    a = (torch.rand(M, K, generator=gen) - 0.5).to(dtype)
    b = (torch.rand(K, N, generator=gen) - 0.5).to(dtype)
    facts = openblas_facts()
    impl = onednn_matmul_impl(a, b)
    if impl:
        library = f"oneDNN {impl}"
    elif facts["openblas_core"] != "none":
        library = f"OpenBLAS core {facts['openblas_core']}"
    else:
        library = "PyTorch's own"
    best = 0.0
    for _ in range(reps):
        t0 = time.perf_counter()
        torch.matmul(a, b)
        best = max(best, 2.0 * M * N * K / (time.perf_counter() - t0) / 1e9)
    facts.update(gemm_library=library, gemm_precision=precision, gemm_shape=f"{M}x{N}x{K}", gemm_gflops=round(best, 1),
                 torch_threads=torch.get_num_threads(), openblas_coretype=os.environ.get("OPENBLAS_CORETYPE", ""),
                 mkldnn=torch.backends.mkldnn.is_available(), mkl=torch.backends.mkl.is_available())
    return facts


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--embd", type=int, default=256)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--vocab", type=int, default=256)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--lr", type=float, default=3e-4)
    # The per-parameter loop measured faster than the multi-tensor path on CPU with PyTorch 1.13
    # (124M shape: 276 vs 487 ms per update), so it is the default: PyTorch at its best.
    parser.add_argument("--foreach", choices=["on", "off"], default="off",
                        help="AdamW's multi-tensor update")
    # PyTorch's CPU mixed precision: autocast runs matmuls (and the ops on its lower-precision list)
    # in bf16 while the parameters, gradients and AdamW stay fp32.
    parser.add_argument("--autocast", choices=["off", "bf16"], default="off",
                        help="torch.autocast(device_type='cpu', dtype=torch.bfloat16) around the forward")
    parser.add_argument("--gemm-only", action="store_true",
                        help="print the GEMM library facts and rate at the model's main product, train nothing")
    args = parser.parse_args()

    torch.set_num_threads(args.threads)
    B, T = args.batch, args.seq
    gemm_precision = "bf16" if args.autocast == "bf16" else "fp32"
    if args.gemm_only:
        facts = gemm_facts(B * T, 4 * args.embd, args.embd, gemm_precision)
        facts["impl"] = "pytorch"
        print(json.dumps(facts))
        return 0
    ref = load_reference()
    spec = ref.ModelSpec(arch="gpt2", n_layer=args.layers, n_head=args.heads, n_embd=args.embd,
                         vocab_size=args.vocab, seq_len=args.seq, ffn_hidden=4 * args.embd, bias=True,
                         tied_embeddings=True)
    params = ref.init_parameters(spec, seed=1234)
    optimizer = ref.make_adamw(params, args.lr, 0.9, 0.95, 1e-8, 0.1, foreach=args.foreach == "on")
    n_params = sum(p.numel() for p in params.values())

    gen = torch.Generator().manual_seed(7)
    total = args.warmup + args.steps
    batches = []
    for _ in range(total):
        seq = torch.randint(0, args.vocab, (B, T + 1), generator=gen)
        batches.append((seq[:, :-1].contiguous(), seq[:, 1:].contiguous()))

    step_s, forward_s, backward_s, optimizer_s = [], [], [], []
    loss_first = loss_last = 0.0
    for s, (tokens, targets) in enumerate(batches):
        t0 = time.perf_counter()
        with torch.autocast(device_type="cpu", dtype=torch.bfloat16, enabled=args.autocast == "bf16"):
            loss = ref.forward_loss(spec, params, tokens, targets)
        t1 = time.perf_counter()
        loss.backward()
        t2 = time.perf_counter()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        t3 = time.perf_counter()
        value = loss.item()
        if s == 0:
            loss_first = value
        loss_last = value
        if s < args.warmup:
            continue
        forward_s.append(t1 - t0)
        backward_s.append(t2 - t1)
        optimizer_s.append(t3 - t2)
        step_s.append(t3 - t0)

    total_s = sum(step_s)
    ms = 1e3 * statistics.median(step_s)
    result = {
        "impl": "pytorch", "L": args.layers, "C": args.embd, "H": args.heads, "T": T, "B": B, "V": args.vocab,
        "params": n_params, "threads": args.threads, "warmup": args.warmup, "steps": args.steps,
        "ms_per_step": round(ms, 3), "tokens_per_s": round(B * T / (ms / 1e3), 1),
        "forward_share": round(sum(forward_s) / total_s, 4), "backward_share": round(sum(backward_s) / total_s, 4),
        "optimizer_share": round(sum(optimizer_s) / total_s, 4), "loss_first": round(loss_first, 5),
        "loss_last": round(loss_last, 5), "torch": torch.__version__, "adamw_foreach": args.foreach == "on",
        "autocast": args.autocast,
    }
    # After the steps, so that it does not warm them up.
    result.update(gemm_facts(B * T, 4 * args.embd, args.embd, gemm_precision))
    print(f"pytorch {torch.__version__} L={args.layers} C={args.embd} H={args.heads} T={T} B={B} V={args.vocab}: "
          f"{n_params} parameters, {args.threads} threads: {ms:.1f} ms/step (median), "
          f"{result['tokens_per_s']:.0f} tokens/s; {gemm_precision} matmul by {result['gemm_library']} "
          f"({result['openblas']}, OPENBLAS_CORETYPE={result['openblas_coretype'] or 'unset'}), "
          f"{result['gemm_gflops']:.1f} GFLOP/s at {result['gemm_shape']}")
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
