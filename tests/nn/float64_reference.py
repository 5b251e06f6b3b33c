#!/usr/bin/python3
"""How far float32 gradients sit from float64 ones: tessera's and PyTorch's, on the same weights.

Usage: float64_reference.py IN.safetensors OUT.safetensors

IN is what tests/nn/torch_reference.py reads (every parameter in f32, `batch.tokens`,
`batch.targets`, the model metadata) plus `tessera.grad.<name>`: tessera's float32 gradient of
each parameter for the mean cross-entropy of that batch. The model of torch_reference.py runs
twice on the same weights, in float64 (the reference; rotary angles kept in float64 too) and in
float32 (PyTorch's own float error). OUT receives, per parameter, `err.tessera.<name>` and
`err.torch.<name>` [1]: the norm-wise relative error ||g32 - g64|| / ||g64|| of tessera's and of
PyTorch's float32 gradient, and `loss64`, `loss32` [1]. The same numbers are printed as a table
grouped by layer.
"""
import os
import re
import sys
from collections import OrderedDict

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_reference as ref  # noqa: E402

_float_rotary = ref._rotary


def _rotary_like(dtype):
    def rotary(spec, T, device):
        D = spec.n_embd // spec.n_head
        i = torch.arange(D // 2, dtype=torch.float64, device=device)
        inv_freq = spec.rope_theta ** (-2.0 * i / D)
        angles = torch.arange(T, dtype=torch.float64, device=device)[:, None] * inv_freq[None, :]
        angles = torch.cat([angles, angles], dim=-1)
        return angles.cos().to(dtype), angles.sin().to(dtype)

    return rotary


def gradients(spec, arrays, shapes, tokens, targets, dtype):
    params = OrderedDict(
        (name, torch.from_numpy(arrays[name].astype(np.float64 if dtype == torch.float64 else np.float32))
         .requires_grad_(True)) for name in shapes)
    ref._rotary = _rotary_like(dtype)
    try:
        loss = ref.forward_loss(spec, params, tokens, targets)
    finally:
        ref._rotary = _float_rotary
    loss.backward()
    return loss.item(), {name: p.grad.detach().to(torch.float64).numpy() for name, p in params.items()}


def relative(a, b):
    return float(np.linalg.norm((a - b).ravel()) / max(np.linalg.norm(b.ravel()), 1e-300))


def main(argv):
    if len(argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    torch.set_num_threads(2)
    torch.use_deterministic_algorithms(True)
    arrays, meta = ref.read_safetensors(argv[1])
    spec = ref.ModelSpec.from_metadata(meta)
    shapes = ref.parameter_shapes(spec)
    tokens = torch.from_numpy(arrays["batch.tokens"].astype(np.int64))
    targets = torch.from_numpy(arrays["batch.targets"].astype(np.int64))
    loss64, g64 = gradients(spec, arrays, shapes, tokens, targets, torch.float64)
    loss32, g32 = gradients(spec, arrays, shapes, tokens, targets, torch.float32)
    out = OrderedDict(loss64=np.array([loss64], np.float32), loss32=np.array([loss32], np.float32))
    rows = []
    for name in shapes:
        mine = arrays["tessera.grad." + name].astype(np.float64)
        e_tessera, e_torch = relative(mine, g64[name]), relative(g32[name], g64[name])
        out["err.tessera." + name] = np.array([e_tessera], np.float32)
        out["err.torch." + name] = np.array([e_torch], np.float32)
        rows.append((name, e_tessera, e_torch))
    ref.write_safetensors(argv[2], out)

    # Per layer: the worst parameter of each block (embeddings and head on their own lines).
    groups = OrderedDict()
    for name, a, b in rows:
        m = re.match(r"blocks\.(\d+)\.", name)
        key = f"layer {m.group(1)}" if m else name
        worst = groups.get(key, (0.0, 0.0))
        groups[key] = (max(worst[0], a), max(worst[1], b))
    print(f"{meta.get('label', '')} loss64 {loss64:.9g}  loss32 {loss32:.9g}")
    print(f"  {'group':28s} {'tessera f32':>12s} {'torch f32':>12s} {'ratio':>7s}")
    for key, (a, b) in groups.items():
        print(f"  {key:28s} {a:12.3e} {b:12.3e} {a / max(b, 1e-300):7.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
