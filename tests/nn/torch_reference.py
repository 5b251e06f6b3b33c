#!/usr/bin/python3
"""An independent PyTorch implementation of tessera's GPT model (GPT-2 and Llama styles).

It shares no code with tessera: the model is written here from its definition, so that agreement
between the two on loss, gradients and a few AdamW steps says both are right.

Usage: torch_reference.py IN.safetensors OUT.safetensors
       torch_reference.py --self-test

IN holds every parameter (f32, tessera names), `batch.tokens` and `batch.targets` ([B, T] i32,
target -1 ignored) and string metadata: arch, n_layer, n_head, n_embd, vocab_size, seq_len,
ffn_hidden, bias, tied_embeddings, norm_eps, rope_theta, lr, beta1, beta2, eps, weight_decay, steps.
OUT receives `loss` [1] (mean cross-entropy of the initial weights), `grad.<name>` (its gradient),
`step_losses` [steps] (the loss at the start of each AdamW step) and `final.<name>` (the weights
after the steps).

The safetensors format is read and written by hand (json + numpy): an 8-byte little-endian header
length, the JSON header, then the data buffer.
"""
import json
import math
import struct
import sys
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

# ---------------------------------------------------------------------------------------------
# safetensors

_NUMPY_DTYPES = {"F32": "<f4", "F16": "<f2", "I32": "<i4", "I8": "i1", "U8": "u1", "F64": "<f8", "I64": "<i8"}


def read_safetensors(path):
    """Returns (OrderedDict name -> numpy array, metadata dict)."""
    with open(path, "rb") as f:
        raw = f.read()
    if len(raw) < 8:
        raise ValueError(f"{path}: {len(raw)} bytes, too short for a safetensors file")
    (header_len,) = struct.unpack("<Q", raw[:8])
    if header_len > len(raw) - 8:
        raise ValueError(f"{path}: header length {header_len} runs past the end of the file")
    header = json.loads(raw[8 : 8 + header_len].decode("utf-8"))
    data = memoryview(raw)[8 + header_len :]
    metadata = header.pop("__metadata__", {}) or {}
    tensors = OrderedDict()
    for name, spec in sorted(header.items(), key=lambda kv: kv[1]["data_offsets"][0]):
        begin, end = spec["data_offsets"]
        if not 0 <= begin <= end <= len(data):
            raise ValueError(f"{path}: tensor {name} has data_offsets {begin, end} outside the data buffer")
        shape = tuple(spec["shape"])
        dtype = spec["dtype"]
        chunk = data[begin:end]
        if dtype == "BF16":
            bits = np.frombuffer(chunk, dtype="<u2").astype(np.uint32) << 16
            array = bits.view(np.float32)
        elif dtype in _NUMPY_DTYPES:
            array = np.frombuffer(chunk, dtype=_NUMPY_DTYPES[dtype])
        else:
            raise ValueError(f"{path}: tensor {name} has unsupported dtype {dtype}")
        expected = int(np.prod(shape, dtype=np.int64))
        if array.size != expected:
            raise ValueError(f"{path}: tensor {name} has {array.size} elements, shape {shape} needs {expected}")
        tensors[name] = array.reshape(shape).copy()
    return tensors, metadata


def write_safetensors(path, tensors, metadata=None):
    """Writes name -> numpy array (f32, i32, ...) with string metadata."""
    names = {np.dtype("<f4"): "F32", np.dtype("<i4"): "I32", np.dtype("<f2"): "F16", np.dtype("i1"): "I8",
             np.dtype("u1"): "U8"}
    header = {}
    blobs = []
    offset = 0
    for name, array in tensors.items():
        array = np.ascontiguousarray(array)
        if array.dtype not in names:
            raise ValueError(f"cannot write tensor {name} of dtype {array.dtype}")
        blob = array.astype(array.dtype.newbyteorder("<"), copy=False).tobytes()
        header[name] = {"dtype": names[array.dtype], "shape": list(array.shape),
                        "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * ((8 - (8 + len(text)) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for blob in blobs:
            f.write(blob)


# ---------------------------------------------------------------------------------------------
# the model


@dataclass
class ModelSpec:
    arch: str = "gpt2"
    n_layer: int = 4
    n_head: int = 4
    n_embd: int = 256
    vocab_size: int = 256
    seq_len: int = 128
    ffn_hidden: int = 1024
    bias: bool = True
    tied_embeddings: bool = True
    norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    n_kv_head: int = 0  # 0: as many as n_head; fewer is grouped-query attention
    activation: str = ""  # "gelu", "relu", "relu2" or "swiglu"; "" is the architecture's own

    @property
    def kv_heads(self):
        return self.n_kv_head or self.n_head

    @property
    def mlp_activation(self):
        return self.activation or ("gelu" if self.arch == "gpt2" else "swiglu")

    @staticmethod
    def from_metadata(meta):
        def flag(key):
            value = meta[key]
            if value not in ("true", "false"):
                raise ValueError(f"metadata {key}={value!r}: expected 'true' or 'false'")
            return value == "true"

        spec = ModelSpec(arch=meta["arch"], n_layer=int(meta["n_layer"]), n_head=int(meta["n_head"]),
                         n_embd=int(meta["n_embd"]), vocab_size=int(meta["vocab_size"]),
                         seq_len=int(meta["seq_len"]), ffn_hidden=int(meta["ffn_hidden"]), bias=flag("bias"),
                         tied_embeddings=flag("tied_embeddings"), norm_eps=float(meta["norm_eps"]),
                         rope_theta=float(meta["rope_theta"]),
                         n_kv_head=int(meta.get("n_kv_head", meta["n_head"])),
                         activation=meta.get("activation", ""))
        if spec.arch not in ("gpt2", "llama"):
            raise ValueError(f"metadata arch={spec.arch!r}: expected 'gpt2' or 'llama'")
        if spec.n_embd % spec.n_head != 0:
            raise ValueError(f"n_embd {spec.n_embd} is not a multiple of n_head {spec.n_head}")
        if spec.n_head % spec.kv_heads != 0:
            raise ValueError(f"n_kv_head {spec.kv_heads} does not divide n_head {spec.n_head}")
        if spec.mlp_activation not in ("gelu", "relu", "relu2", "swiglu"):
            raise ValueError(f"metadata activation={spec.activation!r}: expected gelu, relu, relu2 or swiglu")
        return spec


def parameter_shapes(spec):
    """Every parameter's name and shape, in model order."""
    C, F_, V = spec.n_embd, spec.ffn_hidden, spec.vocab_size
    gpt2 = spec.arch == "gpt2"
    shapes = OrderedDict()

    def linear(prefix, n_out, n_in):
        shapes[prefix + ".weight"] = (n_out, n_in)
        if spec.bias:
            shapes[prefix + ".bias"] = (n_out,)

    def norm(prefix):
        shapes[prefix + ".weight"] = (C,)
        if gpt2 and spec.bias:
            shapes[prefix + ".bias"] = (C,)

    shapes["embed.tokens.weight"] = (V, C)
    if gpt2:
        shapes["embed.positions.weight"] = (spec.seq_len, C)
    for layer in range(spec.n_layer):
        p = f"blocks.{layer}"
        norm(p + ".norm1")
        linear(p + ".attn.qkv", C + 2 * (C // spec.n_head) * spec.kv_heads, C)
        linear(p + ".attn.proj", C, C)
        norm(p + ".norm2")
        if spec.mlp_activation != "swiglu":
            linear(p + ".mlp.fc", F_, C)
            linear(p + ".mlp.proj", C, F_)
        else:
            linear(p + ".mlp.gate", F_, C)
            linear(p + ".mlp.up", F_, C)
            linear(p + ".mlp.down", C, F_)
    norm("norm")
    if not spec.tied_embeddings:
        shapes["head.weight"] = (V, C)
    return shapes


def init_parameters(spec, seed=0, std=0.02):
    """GPT-2 style initial values (for benchmarks; the parity test passes tessera's values)."""
    gen = torch.Generator().manual_seed(seed)
    params = OrderedDict()
    for name, shape in parameter_shapes(spec).items():
        if name.endswith(".bias"):
            value = torch.zeros(shape)
        elif len(shape) == 1:
            value = torch.ones(shape)
        else:
            value = torch.randn(shape, generator=gen) * std
        params[name] = value.requires_grad_(True)
    return params


def _linear(params, prefix, x):
    return F.linear(x, params[prefix + ".weight"], params.get(prefix + ".bias"))


def _norm(spec, params, prefix, x):
    weight = params[prefix + ".weight"]
    if spec.arch == "gpt2":
        return F.layer_norm(x, (spec.n_embd,), weight, params.get(prefix + ".bias"), spec.norm_eps)
    return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + spec.norm_eps) * weight


def _rotary(spec, T, device):
    """cos and sin [T, D] for the rotate-half convention: pair (i, i + D/2), angle t·θ^(−2i/D)."""
    D = spec.n_embd // spec.n_head
    i = torch.arange(D // 2, dtype=torch.float64, device=device)
    inv_freq = spec.rope_theta ** (-2.0 * i / D)
    angles = torch.arange(T, dtype=torch.float64, device=device)[:, None] * inv_freq[None, :]  # [T, D/2]
    angles = torch.cat([angles, angles], dim=-1)
    return angles.cos().float(), angles.sin().float()


def _rotate(x, cos, sin):
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos + rotated * sin


def _attention(spec, params, prefix, x, rope):
    B, T, C = x.shape
    H, Hkv = spec.n_head, spec.kv_heads
    D = C // H
    q, k, v = _linear(params, prefix + ".qkv", x).split([C, Hkv * D, Hkv * D], dim=-1)
    q = q.view(B, T, H, D).transpose(1, 2)  # [B, H, T, D]
    k = k.view(B, T, Hkv, D).transpose(1, 2)  # [B, Hkv, T, D]
    v = v.view(B, T, Hkv, D).transpose(1, 2)
    if rope is not None:
        q = _rotate(q, *rope)
        k = _rotate(k, *rope)
    # Grouped-query attention: each key/value head serves H/Hkv consecutive query heads.
    k = k.repeat_interleave(H // Hkv, dim=1)  # [B, H, T, D]
    v = v.repeat_interleave(H // Hkv, dim=1)
    scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(D))  # [B, H, T, T]
    causal = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
    scores = scores.masked_fill(~causal, float("-inf"))
    y = torch.softmax(scores, dim=-1) @ v  # [B, H, T, D]
    y = y.transpose(1, 2).reshape(B, T, C)
    return _linear(params, prefix + ".proj", y)


_UNGATED = {"gelu": lambda h: F.gelu(h, approximate="tanh"), "relu": F.relu, "relu2": lambda h: F.relu(h).square()}


def _mlp(spec, params, prefix, x):
    if spec.mlp_activation in _UNGATED:
        return _linear(params, prefix + ".proj", _UNGATED[spec.mlp_activation](_linear(params, prefix + ".fc", x)))
    gate = F.silu(_linear(params, prefix + ".gate", x))
    return _linear(params, prefix + ".down", gate * _linear(params, prefix + ".up", x))


def forward_loss(spec, params, tokens, targets):
    """Mean cross-entropy over targets != -1. tokens, targets: [B, T] int64."""
    B, T = tokens.shape
    if T > spec.seq_len:
        raise ValueError(f"sequence of {T} tokens exceeds seq_len {spec.seq_len}")
    x = F.embedding(tokens, params["embed.tokens.weight"])  # [B, T, C]
    rope = None
    if spec.arch == "gpt2":
        x = x + params["embed.positions.weight"][:T]
    else:
        rope = _rotary(spec, T, tokens.device)
    for layer in range(spec.n_layer):
        p = f"blocks.{layer}"
        x = x + _attention(spec, params, p + ".attn", _norm(spec, params, p + ".norm1", x), rope)
        x = x + _mlp(spec, params, p + ".mlp", _norm(spec, params, p + ".norm2", x))
    x = _norm(spec, params, "norm", x)
    head = params["embed.tokens.weight"] if spec.tied_embeddings else params["head.weight"]
    logits = x @ head.t()  # [B, T, V]
    return F.cross_entropy(logits.reshape(-1, spec.vocab_size), targets.reshape(-1), ignore_index=-1)


def make_adamw(params, lr, beta1, beta2, eps, weight_decay, foreach=None):
    """PyTorch's AdamW; matrices and embeddings decay, biases and norm gains do not."""
    decay = [p for p in params.values() if p.dim() >= 2]
    no_decay = [p for p in params.values() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=lr, betas=(beta1, beta2), eps=eps, foreach=foreach)


# ---------------------------------------------------------------------------------------------
# the parity protocol


def run_reference(in_path, out_path):
    arrays, meta = read_safetensors(in_path)
    spec = ModelSpec.from_metadata(meta)
    shapes = parameter_shapes(spec)
    given = {name for name in arrays if not name.startswith("batch.")}
    missing = [n for n in shapes if n not in given]
    extra = sorted(given - set(shapes))
    if missing or extra:
        raise ValueError(f"{in_path}: parameters missing {missing}, unexpected {extra}")

    params = OrderedDict()
    for name, shape in shapes.items():
        array = arrays[name]
        if tuple(array.shape) != shape or array.dtype != np.float32:
            raise ValueError(f"{in_path}: {name} is {array.dtype}{tuple(array.shape)}, expected float32{shape}")
        params[name] = torch.from_numpy(array.copy()).requires_grad_(True)
    tokens = torch.from_numpy(arrays["batch.tokens"].astype(np.int64))
    targets = torch.from_numpy(arrays["batch.targets"].astype(np.int64))
    if tokens.dim() != 2 or tokens.shape != targets.shape:
        raise ValueError(f"{in_path}: batch.tokens {tuple(tokens.shape)} and batch.targets "
                         f"{tuple(targets.shape)} must both be [B, T]")

    steps = int(meta["steps"])
    optimizer = make_adamw(params, float(meta["lr"]), float(meta["beta1"]), float(meta["beta2"]),
                           float(meta["eps"]), float(meta["weight_decay"]))

    out = OrderedDict()

    def loss_and_grads():
        optimizer.zero_grad(set_to_none=True)
        loss = forward_loss(spec, params, tokens, targets)
        loss.backward()
        return loss

    # The loss and gradients of the initial weights are those of the first step's computation.
    loss = loss_and_grads()
    out["loss"] = np.array([loss.item()], dtype=np.float32)
    for name, p in params.items():
        out["grad." + name] = p.grad.detach().numpy().astype(np.float32)

    step_losses = []
    for k in range(steps):
        if k > 0:
            loss = loss_and_grads()
        step_losses.append(loss.item())
        optimizer.step()
    out["step_losses"] = np.array(step_losses, dtype=np.float32)
    for name, p in params.items():
        out["final." + name] = p.detach().numpy().astype(np.float32)
    write_safetensors(out_path, out, {"torch_version": torch.__version__})


# ---------------------------------------------------------------------------------------------
# self-test: the pieces against second, loop-level formulations, and the protocol end to end


def _random_case(spec, B, T, seed):
    rng = np.random.default_rng(seed)
    arrays = OrderedDict()
    for name, shape in parameter_shapes(spec).items():
        base = 1.0 if (len(shape) == 1 and not name.endswith(".bias")) else 0.0
        arrays[name] = (base + 0.2 * rng.standard_normal(shape)).astype(np.float32)
    arrays["batch.tokens"] = rng.integers(0, spec.vocab_size, (B, T)).astype(np.int32)
    targets = rng.integers(0, spec.vocab_size, (B, T)).astype(np.int32)
    targets[0, 1] = -1
    arrays["batch.targets"] = targets
    return arrays


def _check_pieces():
    torch.manual_seed(1)
    spec = ModelSpec(arch="llama", n_layer=1, n_head=2, n_embd=8, vocab_size=5, seq_len=6, ffn_hidden=12, bias=True)
    B, T, C, H, D = 2, 5, 8, 2, 4
    # Rotary: pair (i, i + D/2) as one complex number turned by angle t·θ^(−2i/D).
    x = torch.randn(B, H, T, D, dtype=torch.float64)
    cos, sin = _rotary(spec, T, x.device)
    got = _rotate(x, cos.double(), sin.double())
    z = torch.complex(x[..., : D // 2], x[..., D // 2 :])
    angle = torch.tensor([[t * spec.rope_theta ** (-2.0 * i / D) for i in range(D // 2)] for t in range(T)],
                         dtype=torch.float64)
    w = z * torch.polar(torch.ones_like(angle), angle)
    assert torch.allclose(got, torch.cat([w.real, w.imag], dim=-1), atol=1e-6), "rotary embedding"
    # Attention: position t attends to positions 0..t only.
    params = init_parameters(spec, seed=3, std=0.3)
    params = {k: v.detach().double() for k, v in params.items()}
    xs = torch.randn(B, T, C, dtype=torch.float64)
    got = _attention(spec, params, "blocks.0.attn", xs, None)
    qkv = xs @ params["blocks.0.attn.qkv.weight"].t() + params["blocks.0.attn.qkv.bias"]
    y = torch.zeros(B, T, C, dtype=torch.float64)
    for b in range(B):
        for h in range(H):
            sl = slice(h * D, (h + 1) * D)
            for t in range(T):
                q = qkv[b, t, sl]
                s = torch.stack([q @ qkv[b, j, C:][sl] / math.sqrt(D) for j in range(t + 1)])
                p = torch.exp(s - s.max()) / torch.exp(s - s.max()).sum()
                y[b, t, sl] = sum(p[j] * qkv[b, j, 2 * C :][sl] for j in range(t + 1))
    want = y @ params["blocks.0.attn.proj.weight"].t() + params["blocks.0.attn.proj.bias"]
    assert torch.allclose(got, want, atol=1e-9), "causal attention"
    # RMSNorm.
    got = _norm(spec, params, "norm", xs)
    want = xs / torch.sqrt((xs * xs).sum(-1, keepdim=True) / C + spec.norm_eps) * params["norm.weight"]
    assert torch.allclose(got, want, atol=1e-9), "rmsnorm"


def _check_protocol(tmpdir):
    import os
    for arch, bias, tied in [("gpt2", True, True), ("gpt2", False, False), ("llama", False, True), ("llama", True, False)]:
        spec = ModelSpec(arch=arch, n_layer=2, n_head=2, n_embd=16, vocab_size=11, seq_len=8,
                         ffn_hidden=64 if arch == "gpt2" else 40, bias=bias, tied_embeddings=tied)
        B, T, steps = 3, 6, 3
        arrays = _random_case(spec, B, T, seed=len(arch) + 2 * bias + tied)
        meta = {k: str(v).lower() if isinstance(v, bool) else str(v) for k, v in spec.__dict__.items()}
        meta.update(lr="0.01", beta1="0.9", beta2="0.95", eps="1e-8", weight_decay="0.1", steps=str(steps))
        in_path = os.path.join(tmpdir, f"in_{arch}_{bias}_{tied}.safetensors")
        out_path = in_path.replace("in_", "out_")
        write_safetensors(in_path, arrays, meta)
        run_reference(in_path, out_path)
        out, _ = read_safetensors(out_path)
        shapes = parameter_shapes(spec)
        assert set(out) == {"loss", "step_losses"} | {p + n for n in shapes for p in ("grad.", "final.")}, arch
        for name, shape in shapes.items():
            assert out["grad." + name].shape == shape and out["final." + name].shape == shape, name
            assert out["grad." + name].dtype == np.float32, name
        assert out["step_losses"].shape == (steps,) and out["step_losses"][0] == out["loss"][0]
        assert out["step_losses"][-1] < out["step_losses"][0], "AdamW steps on one batch lower its loss"
        # The mean loss counts only targets that are not -1: a manual log-softmax gives the same number.
        params = OrderedDict((n, torch.from_numpy(arrays[n])) for n in shapes)
        tokens = torch.from_numpy(arrays["batch.tokens"].astype(np.int64))
        targets = torch.from_numpy(arrays["batch.targets"].astype(np.int64))
        with torch.no_grad():
            loss = forward_loss(spec, params, tokens, targets).item()
            changed = targets.clone()
            changed[0, 1] = 3  # the ignored position now counts
            assert abs(forward_loss(spec, params, tokens, changed).item() - loss) > 1e-6
        assert abs(loss - out["loss"][0]) < 1e-6
        if arch == "gpt2":
            assert np.all(out["grad.embed.positions.weight"][T:] == 0), "positions past T get no gradient"
            assert np.any(out["grad.embed.positions.weight"][:T] != 0)


def self_test():
    import tempfile
    torch.set_num_threads(2)
    _check_pieces()
    with tempfile.TemporaryDirectory() as tmpdir:
        _check_protocol(tmpdir)
    print("torch_reference self-test passed")


def main(argv):
    if len(argv) == 2 and argv[1] == "--self-test":
        self_test()
        return 0
    if len(argv) != 3:
        print(__doc__, file=sys.stderr)
        print(f"usage: {argv[0]} IN.safetensors OUT.safetensors", file=sys.stderr)
        return 2
    torch.set_num_threads(2)
    torch.manual_seed(0)
    torch.use_deterministic_algorithms(True)
    run_reference(argv[1], argv[2])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
