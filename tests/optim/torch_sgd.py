#!/usr/bin/python3
"""torch.optim.SGD on tensors tessera wrote, for tests/optim/test_sgd_vs_pytorch.cpp.

Usage: torch_sgd.py IN.safetensors OUT.safetensors

IN holds `param.<name>` (f32, the starting weights), `grad.<step>.<name>` (the gradient of each
step) and metadata: lr, momentum, nesterov, weight_decay, decoupled ("true"/"false"), steps, and
`decayed`: the comma-separated names that decay (matrices and embeddings). OUT receives
`step<k>.<name>`: the weights after step k (1-based). Decoupled decay multiplies the decayed
weights by 1 - lr * weight_decay before each step (SGDW) and runs SGD without weight decay;
otherwise SGD's own (L2) weight decay applies to the decayed group.
"""
import os
import sys
from collections import OrderedDict

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "nn"))
import torch_reference as ref  # noqa: E402


def main(in_path, out_path):
    torch.set_num_threads(1)
    arrays, meta = ref.read_safetensors(in_path)
    lr = float(meta["lr"])
    momentum = float(meta["momentum"])
    nesterov = meta["nesterov"] == "true"
    weight_decay = float(meta["weight_decay"])
    decoupled = meta["decoupled"] == "true"
    steps = int(meta["steps"])
    decayed = set(n for n in meta["decayed"].split(",") if n)
    names = [k[len("param."):] for k in arrays if k.startswith("param.")]
    params = OrderedDict((n, torch.tensor(arrays["param." + n]).clone().requires_grad_(True)) for n in names)
    l2 = 0.0 if decoupled else weight_decay
    groups = [{"params": [params[n] for n in names if n in decayed], "weight_decay": l2},
              {"params": [params[n] for n in names if n not in decayed], "weight_decay": 0.0}]
    opt = torch.optim.SGD(groups, lr=lr, momentum=momentum, nesterov=nesterov, foreach=False)
    out = OrderedDict()
    for s in range(1, steps + 1):
        with torch.no_grad():
            for n in names:
                params[n].grad = torch.tensor(arrays[f"grad.{s}.{n}"]).clone()
                if decoupled and n in decayed:
                    params[n].mul_(1.0 - lr * weight_decay)
        opt.step()
        for n in names:
            out[f"step{s}.{n}"] = params[n].detach().numpy().copy()
    ref.write_safetensors(out_path, out, {"torch_version": torch.__version__})


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
