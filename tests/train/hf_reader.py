#!/usr/bin/python3
"""Reads a model exported in the Hugging Face layout and computes its loss on a batch.

It knows nothing of tessera: the forward passes of GPT2LMHeadModel, LlamaForCausalLM and
MixtralForCausalLM are written here from the Hugging Face names and config.json alone, as
transformers defines them (GPT-2: Conv1D weights [in, out], learned positions, LayerNorm, GELU tanh
approximation, head tied to wte unless lm_head.weight is given; Llama: RMSNorm, rotate-half rotary
positions with inv_freq = 1 / theta^(2i/D), SwiGLU MLP, q/k/v/o projections as nn.Linear
[out, in]; Mixtral: Llama with every MLP a sparse MoE block, router `gate` [E, C], softmax over the
experts, the top num_experts_per_tok kept and their weights renormalized to sum to 1, experts
w2(silu(w1 x) * w3 x), no capacity). Agreement of its loss with tessera's says the export's names,
transposes, splits and config are right.

Usage: hf_reader.py MODEL_DIR BATCH.safetensors [--unnormalized-gates]
--unnormalized-gates weights Mixtral's chosen experts by their softmax probabilities as they are,
without the renormalization (tessera's router), so that the loss can be compared with tessera's.
BATCH holds `tokens` and `targets` ([B, T] int32). Prints one JSON line:
{"loss": <mean cross-entropy>, "model_type": ..., "tensors": <count>}.
It fails (non-zero exit, message on stderr) when a tensor is missing, has the wrong shape, or is
left unused, or config.json lacks a field it needs.
"""
import json
import math
import os
import struct
import sys

import numpy as np
import torch
import torch.nn.functional as F


def read_safetensors(path):
    """Returns ({name: tensor}, metadata): 8-byte header length, JSON header, data buffer."""
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + n])
    meta = header.pop("__metadata__", {})
    data = raw[8 + n :]
    kinds = {"F32": np.float32, "I32": np.int32}
    out = {}
    for name, spec in header.items():
        begin, end = spec["data_offsets"]
        array = np.frombuffer(data[begin:end], dtype=kinds[spec["dtype"]]).reshape(spec["shape"])
        out[name] = torch.from_numpy(array.copy())
    return out, meta


class Weights:
    """The tensors of the file; take() checks shapes and records use, so unused tensors fail."""

    def __init__(self, tensors):
        self.tensors = tensors
        self.used = set()

    def take(self, name, shape):
        if name not in self.tensors:
            raise KeyError(f"model.safetensors has no tensor {name}")
        t = self.tensors[name]
        if tuple(t.shape) != tuple(shape):
            raise ValueError(f"{name} has shape {tuple(t.shape)}, expected {tuple(shape)}")
        self.used.add(name)
        return t

    def check_all_used(self):
        unused = sorted(set(self.tensors) - self.used)
        if unused:
            raise ValueError(f"tensors the model does not read: {unused}")


def causal_attention(q, k, v):
    """q, k, v [B, H, T, D] -> [B, H, T, D]: softmax(q kᵀ / sqrt(D)) v, each position seeing itself and before."""
    T, D = q.shape[-2], q.shape[-1]
    mask = torch.ones(T, T, dtype=torch.bool).tril()
    s = (q @ k.transpose(-1, -2)) / math.sqrt(D)
    return torch.softmax(s.masked_fill(~mask, float("-inf")), dim=-1) @ v


def gpt2_logits(cfg, w, tokens):
    V, T_max, C, L, H = cfg["vocab_size"], cfg["n_positions"], cfg["n_embd"], cfg["n_layer"], cfg["n_head"]
    Fh = cfg.get("n_inner") or 4 * C
    eps = cfg["layer_norm_epsilon"]
    # transformers' ACT2FN: gelu_new is GELU's tanh approximation, relu2 ReLUSquaredActivation.
    acts = {"gelu_new": lambda h: F.gelu(h, approximate="tanh"), "relu": F.relu, "relu2": lambda h: F.relu(h) ** 2}
    if cfg["activation_function"] not in acts:
        raise ValueError(f"activation_function {cfg['activation_function']!r}: this reader knows {sorted(acts)}")
    act = acts[cfg["activation_function"]]
    B, T = tokens.shape
    D = C // H
    wte = w.take("transformer.wte.weight", (V, C))
    x = wte[tokens] + w.take("transformer.wpe.weight", (T_max, C))[:T]

    def ln(name, x):
        return F.layer_norm(x, (C,), w.take(name + ".weight", (C,)), w.take(name + ".bias", (C,)), eps)

    def conv1d(name, x, n_in, n_out):  # transformers' Conv1D: x @ W + b, W [in, out]
        return x @ w.take(name + ".weight", (n_in, n_out)) + w.take(name + ".bias", (n_out,))

    for l in range(L):
        p = f"transformer.h.{l}."
        q, k, v = conv1d(p + "attn.c_attn", ln(p + "ln_1", x), C, 3 * C).split(C, dim=-1)
        q, k, v = (t.view(B, T, H, D).transpose(1, 2) for t in (q, k, v))
        y = causal_attention(q, k, v).transpose(1, 2).reshape(B, T, C)
        x = x + conv1d(p + "attn.c_proj", y, C, C)
        h = conv1d(p + "mlp.c_fc", ln(p + "ln_2", x), C, Fh)
        x = x + conv1d(p + "mlp.c_proj", act(h), Fh, C)
    x = ln("transformer.ln_f", x)
    head = wte if cfg.get("tie_word_embeddings", True) else w.take("lm_head.weight", (V, C))
    return x @ head.t()


def mixtral_moe(cfg, w, p, h, unnormalized_gates):
    """MixtralSparseMoeBlock of layer prefix p on h [B, T, C]."""
    C, Fh = cfg["hidden_size"], cfg["intermediate_size"]
    E, k = cfg["num_local_experts"], cfg["num_experts_per_tok"]
    x = h.reshape(-1, C)
    probs = torch.softmax(F.linear(x, w.take(p + "block_sparse_moe.gate.weight", (E, C))), dim=-1)
    gates, chosen = torch.topk(probs, k, dim=-1)
    if not unnormalized_gates:
        gates = gates / gates.sum(dim=-1, keepdim=True)
    out = torch.zeros_like(x)
    for e in range(E):
        q = f"{p}block_sparse_moe.experts.{e}."
        y = F.silu(F.linear(x, w.take(q + "w1.weight", (Fh, C)))) * F.linear(x, w.take(q + "w3.weight", (Fh, C)))
        y = F.linear(y, w.take(q + "w2.weight", (C, Fh)))
        out = out + (gates * (chosen == e)).sum(dim=-1, keepdim=True) * y
    return out.view(h.shape)


def llama_logits(cfg, w, tokens, unnormalized_gates=False):
    V, C, L, H = cfg["vocab_size"], cfg["hidden_size"], cfg["num_hidden_layers"], cfg["num_attention_heads"]
    KV = cfg.get("num_key_value_heads") or H
    D = cfg.get("head_dim") or C // H
    Fh, eps, theta = cfg["intermediate_size"], cfg["rms_norm_eps"], cfg["rope_theta"]
    if cfg["hidden_act"] != "silu":
        raise ValueError(f"hidden_act {cfg['hidden_act']!r}: this reader knows silu")
    attn_bias, mlp_bias = cfg.get("attention_bias", False), cfg.get("mlp_bias", False)
    B, T = tokens.shape
    embed = w.take("model.embed_tokens.weight", (V, C))
    x = embed[tokens]

    def rms(name, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w.take(name + ".weight", (C,))

    def linear(name, x, n_in, n_out, bias):  # nn.Linear: W [out, in]
        return F.linear(x, w.take(name + ".weight", (n_out, n_in)), w.take(name + ".bias", (n_out,)) if bias else None)

    # transformers' LlamaRotaryEmbedding: inv_freq = 1 / theta^(arange(0, D, 2) / D), the angles
    # repeated over both halves of the head, rotate_half(x) = (-x2, x1).
    inv_freq = 1.0 / (theta ** (torch.arange(0, D, 2, dtype=torch.float32) / D))
    angles = torch.arange(T, dtype=torch.float32)[:, None] * inv_freq[None, :]
    angles = torch.cat([angles, angles], dim=-1)
    cos, sin = angles.cos(), angles.sin()

    def rotate(t):
        half = t.shape[-1] // 2
        return t * cos + torch.cat([-t[..., half:], t[..., :half]], dim=-1) * sin

    for l in range(L):
        p = f"model.layers.{l}."
        h = rms(p + "input_layernorm", x)
        q = linear(p + "self_attn.q_proj", h, C, H * D, attn_bias).view(B, T, H, D).transpose(1, 2)
        k = linear(p + "self_attn.k_proj", h, C, KV * D, attn_bias).view(B, T, KV, D).transpose(1, 2)
        v = linear(p + "self_attn.v_proj", h, C, KV * D, attn_bias).view(B, T, KV, D).transpose(1, 2)
        k, v = (t.repeat_interleave(H // KV, dim=1) for t in (k, v))
        y = causal_attention(rotate(q), rotate(k), v).transpose(1, 2).reshape(B, T, H * D)
        x = x + linear(p + "self_attn.o_proj", y, H * D, C, attn_bias)
        h = rms(p + "post_attention_layernorm", x)
        if cfg["model_type"] == "mixtral":
            x = x + mixtral_moe(cfg, w, p, h, unnormalized_gates)
            continue
        g = F.silu(linear(p + "mlp.gate_proj", h, C, Fh, mlp_bias)) * linear(p + "mlp.up_proj", h, C, Fh, mlp_bias)
        x = x + linear(p + "mlp.down_proj", g, Fh, C, mlp_bias)
    x = rms("model.norm", x)
    head = embed if cfg.get("tie_word_embeddings", False) else w.take("lm_head.weight", (V, C))
    return x @ head.t()


def main(argv):
    if len(argv) not in (3, 4) or (len(argv) == 4 and argv[3] != "--unnormalized-gates"):
        print(__doc__, file=sys.stderr)
        return 2
    torch.set_num_threads(2)
    model_dir, batch_path = argv[1], argv[2]
    unnormalized_gates = len(argv) == 4
    with open(os.path.join(model_dir, "config.json")) as f:
        cfg = json.load(f)
    tensors, meta = read_safetensors(os.path.join(model_dir, "model.safetensors"))
    if meta.get("format") != "pt":
        raise ValueError(f"model.safetensors metadata format is {meta.get('format')!r}; transformers needs 'pt'")
    batch, _ = read_safetensors(batch_path)
    tokens, targets = batch["tokens"].long(), batch["targets"].long()
    w = Weights(tensors)
    kinds = {
        "gpt2": gpt2_logits,
        "llama": llama_logits,
        "mixtral": lambda cfg, w, tokens: llama_logits(cfg, w, tokens, unnormalized_gates),
    }
    if cfg.get("model_type") not in kinds:
        raise ValueError(f"config.json model_type {cfg.get('model_type')!r} is not gpt2, llama or mixtral")
    with torch.no_grad():
        logits = kinds[cfg["model_type"]](cfg, w, tokens)
        loss = F.cross_entropy(logits.reshape(-1, cfg["vocab_size"]), targets.reshape(-1))
    w.check_all_used()
    print(json.dumps({"loss": loss.item(), "model_type": cfg["model_type"], "tensors": len(tensors)}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
