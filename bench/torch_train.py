#!/usr/bin/python3
"""PyTorch's training throughput on the model train_bench measures: GPT-2 style, fp32, tied
embeddings, biases, GELU (tanh), AdamW; the same steps (forward, backward, AdamW update, zeroed
gradients) on random tokens. The model code is tests/nn/torch_reference.py, the independent
implementation the parity test checks tessera against.

Prints a short line and, last, one JSON line with the fields train_bench prints.

  torch_train.py --layers 4 --embd 256 --heads 4 --seq 128 --batch 8 --vocab 256 --steps 10
"""
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
    args = parser.parse_args()

    torch.set_num_threads(args.threads)
    ref = load_reference()
    spec = ref.ModelSpec(arch="gpt2", n_layer=args.layers, n_head=args.heads, n_embd=args.embd,
                         vocab_size=args.vocab, seq_len=args.seq, ffn_hidden=4 * args.embd, bias=True,
                         tied_embeddings=True)
    params = ref.init_parameters(spec, seed=1234)
    optimizer = ref.make_adamw(params, args.lr, 0.9, 0.95, 1e-8, 0.1, foreach=args.foreach == "on")
    n_params = sum(p.numel() for p in params.values())

    B, T = args.batch, args.seq
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
    print(f"pytorch {torch.__version__} L={args.layers} C={args.embd} H={args.heads} T={T} B={B} V={args.vocab}: "
          f"{n_params} parameters, {args.threads} threads: {ms:.1f} ms/step (median), "
          f"{result['tokens_per_s']:.0f} tokens/s")
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
