#!/usr/bin/env python3
"""An independent reference for dqt's training step: a tiny LLaMA written in PyTorch (Debian's
python3-torch), in float64, with the same initial weights and batch as dqt's test. Writes the
logits, the mean loss and every parameter's gradient, for fp and for bitnet (absmean ternary
weights, 8-bit absmax activations per token, straight-through), each with its own head and with
the head tied to the embedding table ("fp.tied", "bitnet.tied"), to a safetensors file that
tests/test_torch_reference.cpp compares with dqt's own forward and backward.

    apt-get install python3-torch libopenblas0-pthread
    OPENBLAS_CORETYPE=SkylakeX /usr/bin/python3 scripts/torch_reference.py tests/golden/torch_reference.safetensors

The model is dqt's (docs/METHOD.md section 1): SubLN norms, grouped-query attention, rotary
embedding on interleaved pairs (x[2i], x[2i+1]), SwiGLU, an fp32 head. Nothing of dqt's
code is used. bitnet rounds values v to the nearest integer; the seed is chosen so that every value rounded
(weights over their absmean, activations times 127 / absmax) lies at least MARGIN * max(|v|, 1)
from a rounding boundary, so that fp32 arithmetic in another order (relative error far below
MARGIN) cannot round any of them the other way.
"""
import json
import struct
import sys

import torch

CONFIG = {"dim": 32, "n_layers": 2, "n_heads": 4, "n_kv_heads": 2, "ffn_dim": 32, "vocab_size": 32,
          "seq_len": 8, "subln": True, "tie_embeddings": False, "rope_theta": 10000.0, "norm_eps": 1e-5,
          "init_std": 0.1}
BATCH = 2
MARGIN = 1e-5  # relative: |v - boundary| >= MARGIN * max(|v|, 1), about 100 fp32 ulps
TERNARY_EPS = 1e-5  # dqt's kTernaryEps: q = round(W / (mean|W| + eps))
ACTIVATION_FLOOR = 1e-5  # s = 127 / max(max|x|, floor)


def parameter_shapes(c):
    """dqt's tensors in its own order and names (model/parameters.cpp), (rows, cols) each."""
    C, F, V, KV = c["dim"], c["ffn_dim"], c["vocab_size"], c["n_kv_heads"] * c["dim"] // c["n_heads"]
    shapes = [("token_embd", (V, C))]
    for l in range(c["n_layers"]):
        p = f"blk.{l}."
        shapes += [(p + "attn_norm", (1, C)), (p + "attn_q", (C, C)), (p + "attn_k", (KV, C)),
                   (p + "attn_v", (KV, C)), (p + "attn_sub_norm", (1, C)), (p + "attn_output", (C, C)),
                   (p + "ffn_norm", (1, C)), (p + "ffn_gate", (F, C)), (p + "ffn_up", (F, C)),
                   (p + "ffn_sub_norm", (1, F)), (p + "ffn_down", (C, F))]
    return shapes + [("output_norm", (1, C)), ("output", (V, C))]


class Rounded:
    """Every value bitnet rounds, for the closest relative distance of one to a rounding boundary."""

    def __init__(self):
        self.closest = float("inf")

    def round(self, x):
        v = x.detach()
        distance = (v - torch.floor(v) - 0.5).abs() / torch.clamp(v.abs(), min=1.0)
        self.closest = min(self.closest, distance.min().item())
        return torch.round(x)


def ternary_weight(w, rounded):
    gamma = w.detach().abs().mean()
    q = torch.clamp(rounded.round(w / (gamma + TERNARY_EPS)), -1, 1)
    return w + (q * gamma - w).detach()  # straight-through


def quantized_activations(x, rounded):
    s = 127.0 / torch.clamp(x.detach().abs().amax(dim=-1, keepdim=True), min=ACTIVATION_FLOOR)
    a = torch.clamp(rounded.round(x * s), -128, 127)
    return x + (a / s - x).detach()  # straight-through


def rmsnorm(x, gain, eps):
    return x * torch.rsqrt((x * x).mean(dim=-1, keepdim=True) + eps) * gain


def rope(x, theta):
    """x (B, T, heads, D): pairs (2i, 2i+1) of position t rotated by t * theta^(-2i / D)."""
    B, T, H, D = x.shape
    inv_freq = theta ** (-torch.arange(0, D, 2, dtype=torch.float64) / D)
    angle = torch.arange(T, dtype=torch.float64)[:, None] * inv_freq[None, :]  # (T, D/2)
    cos, sin = torch.cos(angle)[None, :, None, :], torch.sin(angle)[None, :, None, :]
    x0, x1 = x[..., 0::2], x[..., 1::2]
    return torch.stack([x0 * cos - x1 * sin, x0 * sin + x1 * cos], dim=-1).reshape(B, T, H, D)


def forward(c, w, tokens, targets, method, tied, rounded):
    B, T = tokens.shape
    H, KV, D = c["n_heads"], c["n_kv_heads"], c["dim"] // c["n_heads"]
    eps = c["norm_eps"]

    def linear(x, name):
        if method == "bitnet":
            return quantized_activations(x, rounded) @ ternary_weight(w[name], rounded).T
        return x @ w[name].T

    x = w["token_embd"][tokens]  # (B, T, C)
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    for l in range(c["n_layers"]):
        p = f"blk.{l}."
        n = rmsnorm(x, w[p + "attn_norm"][0], eps)
        q = rope(linear(n, p + "attn_q").reshape(B, T, H, D), c["rope_theta"])
        k = rope(linear(n, p + "attn_k").reshape(B, T, KV, D), c["rope_theta"])
        v = linear(n, p + "attn_v").reshape(B, T, KV, D)
        k, v = k.repeat_interleave(H // KV, dim=2), v.repeat_interleave(H // KV, dim=2)  # query head h reads kv h / (H / KV)
        scores = torch.einsum("bthd,bshd->bhts", q, k) / D ** 0.5
        probs = torch.softmax(scores.masked_fill(~causal, float("-inf")), dim=-1)
        att = torch.einsum("bhts,bshd->bthd", probs, v).reshape(B, T, H * D)
        x = x + linear(rmsnorm(att, w[p + "attn_sub_norm"][0], eps), p + "attn_output")
        n = rmsnorm(x, w[p + "ffn_norm"][0], eps)
        h = torch.nn.functional.silu(linear(n, p + "ffn_gate")) * linear(n, p + "ffn_up")
        x = x + linear(rmsnorm(h, w[p + "ffn_sub_norm"][0], eps), p + "ffn_down")
    head = w["token_embd"] if tied else w["output"]  # the head stays fp (BitNet keeps it)
    logits = rmsnorm(x, w["output_norm"][0], eps) @ head.T
    loss = torch.nn.functional.cross_entropy(logits.reshape(B * T, -1), targets.reshape(-1))
    return logits.reshape(B * T, -1), loss


def initial_weights(c, generator):
    weights = {}
    for name, shape in parameter_shapes(c):
        if shape[0] == 1:  # norm gains away from 1, so their gradients are exercised generically
            values = 1.0 + 0.2 * torch.randn(shape, generator=generator, dtype=torch.float64)
        else:
            values = c["init_std"] * torch.randn(shape, generator=generator, dtype=torch.float64)
        weights[name] = values.float().double()  # exactly representable in fp32, as dqt holds them
    return weights


def write_safetensors(path, tensors, metadata):
    """tensors: name -> (dtype, shape, bytes), in the order given; the format of
    huggingface/safetensors: u64 header length, JSON header, raw little-endian data."""
    header, offset = {"__metadata__": metadata}, 0
    for name, (dtype, shape, data) in tensors.items():
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text)
        for _, _, data in tensors.values():
            f.write(data)


def as_entry(t, dtype):
    t = t.detach().contiguous()
    torch_dtype = {"F32": torch.float32, "F64": torch.float64, "I32": torch.int32}[dtype]
    return dtype, tuple(t.shape), t.to(torch_dtype).numpy().tobytes()


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: torch_reference.py OUT.safetensors")
    c = CONFIG
    for seed in range(1, 1000):
        generator = torch.Generator().manual_seed(seed)
        weights = initial_weights(c, generator)
        tokens = torch.randint(0, c["vocab_size"], (BATCH, c["seq_len"]), generator=generator)
        targets = torch.randint(0, c["vocab_size"], (BATCH, c["seq_len"]), generator=generator)
        results, rounded = {}, Rounded()
        for method in ("fp", "bitnet"):
            for tied in (False, True):
                w = {name: value.clone().requires_grad_(True) for name, value in weights.items()}
                logits, loss = forward(c, w, tokens, targets, method, tied, rounded)
                loss.backward()
                grads = {name: w[name].grad for name in w if not (tied and name == "output")}
                results[method + (".tied" if tied else "")] = (logits, loss, grads)
        if rounded.closest >= MARGIN:
            break
    else:
        sys.exit("torch_reference: no seed below 1000 keeps every rounded value MARGIN from a boundary")

    tensors = {"tokens": as_entry(tokens, "I32"), "targets": as_entry(targets, "I32")}
    tensors.update({f"weight.{name}": as_entry(value, "F32") for name, value in weights.items()})
    for method, (logits, loss, grads) in results.items():
        tensors[f"{method}.logits"] = as_entry(logits, "F32")
        tensors[f"{method}.loss"] = as_entry(loss.reshape(1), "F64")
        tensors.update({f"{method}.grad.{name}": as_entry(g, "F32") for name, g in grads.items()})
    metadata = {"config": json.dumps(c), "batch": str(BATCH), "seed": str(seed), "torch": torch.__version__,
                "closest_rounding_margin": f"{rounded.closest:.3g}"}
    write_safetensors(sys.argv[1], tensors, metadata)
    print(f"torch_reference: seed {seed}, closest rounded value {rounded.closest:.3g} x max(|v|, 1) from a "
          f"boundary, fp loss {results['fp'][1].item():.6f}, bitnet loss {results['bitnet'][1].item():.6f}")


if __name__ == "__main__":
    main()
