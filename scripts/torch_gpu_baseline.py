#!/usr/bin/env python3
"""The PyTorch baseline of issue 31: the paper's 130M LLaMA (dqt's architecture: SubLN, GQA-capable
attention, interleaved RoPE, SwiGLU, fp head) trained as a researcher would write it in PyTorch,
for fp, bitnet (fp32 latent weights, absmean ternary, 8-bit activations, straight-through) and
DQT (int8 codes plus one scale per tensor; Adam moments in fp32; stochastic rounding onto the
grid after each step), ternary and 8-bit, each eager and under torch.compile. bf16 autocast,
PyTorch's fused AdamW and flash attention (scaled_dot_product_attention): the strongest
PyTorch a user gets without writing kernels. Prints one JSON line per run: tokens/s over the
timed steps (after warm-up), model FLOPs utilisation, peak memory (torch.cuda.max_memory_allocated)
and the loss. Random tokens: throughput and memory do not depend on the text.

    python3 scripts/torch_gpu_baseline.py --methods fp bitnet dqt-1.58 dqt-8 --modes eager compile
    python3 scripts/torch_gpu_baseline.py --device cpu --dim 64 --layers 2 --heads 4 --ffn 128 \\
        --vocab 256 --seq 32 --batch 2 --steps 3 --warmup 1   # a smoke test without a GPU
    python3 scripts/torch_gpu_baseline.py --methods bitnet --recompute   # with activation checkpointing
"""
import argparse
import json
import math
import time

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

TERNARY_EPS = 1e-5
ACTIVATION_FLOOR = 1e-5


def rmsnorm(x, gain, eps=1e-5):
    return x * torch.rsqrt((x.float() * x.float()).mean(dim=-1, keepdim=True) + eps).to(x.dtype) * gain


def rope_tables(seq, head_dim, theta, device):
    inv_freq = theta ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
    angle = torch.arange(seq, dtype=torch.float64)[:, None] * inv_freq[None, :]
    return torch.cos(angle).float().to(device), torch.sin(angle).float().to(device)


def rope(x, cos, sin):
    """x (B, T, H, D): pairs (2i, 2i+1) rotated."""
    B, T, H, D = x.shape
    x0, x1 = x[..., 0::2], x[..., 1::2]
    c, s = cos[None, :T, None, :].to(x.dtype), sin[None, :T, None, :].to(x.dtype)
    return torch.stack([x0 * c - x1 * s, x0 * s + x1 * c], dim=-1).reshape(B, T, H, D)


def causal_attention(q, k, v):
    """q, k, v (B, H, T, D). PyTorch's flash attention where it has one (2.0 on)."""
    if hasattr(F, "scaled_dot_product_attention"):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    T = q.shape[2]
    scores = (q @ k.transpose(-1, -2)) / q.shape[-1] ** 0.5
    mask = torch.ones(T, T, dtype=torch.bool, device=q.device).tril()
    return torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1) @ v


def ste_ternary(w):
    gamma = w.abs().mean()
    q = torch.clamp(torch.round(w / (gamma + TERNARY_EPS)), -1, 1)
    return w + (q * gamma - w).detach()


def ste_activations(x):
    s = 127.0 / torch.clamp(x.abs().amax(dim=-1, keepdim=True), min=ACTIVATION_FLOOR)
    return x + (torch.clamp(torch.round(x * s), -128, 127) / s - x).detach()


class CodedWeight:
    """A DQT weight: int8 codes and one fp32 scale, W = q / scale; no fp32 master copy."""

    def __init__(self, w, bits):
        self.qn, self.qp = (-1, 1) if bits == "1.58" else (-(2 ** (int(bits) - 1)), 2 ** (int(bits) - 1) - 1)
        mean_abs = w.abs().mean().item()
        self.scale = torch.tensor(self.qp / max(mean_abs, 1e-5) if self.qp > 1 else 1.0 / max(mean_abs, 1e-5),
                                  device=w.device)
        self.codes = torch.clamp(torch.round(w * self.scale), self.qn, self.qp).to(torch.int8)
        self.m = torch.zeros_like(w)
        self.v = torch.zeros_like(w)
        self.dense = None  # the weight the forward reads this step (a leaf that receives .grad)

    def materialise(self, dtype):
        self.dense = (self.codes.to(dtype) / self.scale.to(dtype)).requires_grad_(True)
        return self.dense


def dqt_update_tensors(codes, scale, m, v, g, step_size, keep, qn: int, qp: int, b1: float = 0.9, b2: float = 0.95,
                       eps: float = 1e-8):
    """Adam on W = q / scale, decay, stochastic rounding back to the grid (reference scale rule).
    step_size and keep are 0-d tensors, so that torch.compile traces one graph for every step."""
    m.mul_(b1).add_(g, alpha=1 - b1)
    v.mul_(b2).addcmul_(g, g, value=1 - b2)
    w = codes.float() / scale
    new_scale = qp / w.max().clamp(min=1e-12)
    w = (w - step_size * m / (v.sqrt() + eps)) * keep
    x = torch.clamp(w * new_scale, qn, qp)
    codes.copy_(torch.floor(x + torch.rand_like(x)).to(torch.int8))
    scale.copy_(new_scale)


def dqt_update(update_fn, coded, lr, t, b1=0.9, b2=0.95, wd=0.1):
    device = coded.codes.device
    step_size = torch.tensor(lr * math.sqrt(1 - b2 ** t) / (1 - b1 ** t), device=device)
    keep = torch.tensor(1 - lr * wd, device=device)
    update_fn(coded.codes, coded.scale, coded.m, coded.v, coded.dense.grad.float(), step_size, keep, coded.qn, coded.qp)


class Model(torch.nn.Module):
    def __init__(self, a, method, device):
        super().__init__()
        self.a, self.method = a, method
        C, F_, V, H, KV = a.dim, a.ffn, a.vocab, a.heads, a.kv_heads
        D = C // H
        g = torch.Generator(device="cpu").manual_seed(0)

        def normal(rows, cols):
            return (torch.randn(rows, cols, generator=g) * 0.02).to(device)

        self.embed = torch.nn.Parameter(normal(V, C))
        self.head = torch.nn.Parameter(normal(V, C))
        self.norms = torch.nn.ParameterList()
        shapes = []
        for _ in range(a.layers):
            shapes += [(C, C), (KV * D, C), (KV * D, C), (C, C), (F_, C), (F_, C), (C, F_)]
            for n in (C, C, C, F_):  # attn_norm, attn_sub_norm, ffn_norm, ffn_sub_norm
                self.norms.append(torch.nn.Parameter(torch.ones(n, device=device)))
        self.final_norm = torch.nn.Parameter(torch.ones(C, device=device))
        if method.startswith("dqt"):
            self.coded = [CodedWeight(normal(*s), method.split("-")[1]) for s in shapes]
            self.latent = torch.nn.ParameterList()
        else:
            self.coded = []
            self.latent = torch.nn.ParameterList([torch.nn.Parameter(normal(*s)) for s in shapes])
        self.cos, self.sin = rope_tables(a.seq, D, 10000.0, device)

    def weights(self, dtype):
        if self.coded:
            return [c.materialise(dtype) for c in self.coded]
        return list(self.latent)

    def forward(self, tokens, targets, weights):
        a, method = self.a, self.method
        B, T = tokens.shape
        H, KV = a.heads, a.kv_heads
        D = a.dim // H
        quantized = method != "fp"

        def linear(x, w):
            if method == "bitnet":
                return ste_activations(x) @ ste_ternary(w).T
            if quantized:
                return ste_activations(x) @ w.T
            return x @ w.T

        def block(x, l):
            wq, wk, wv, wo, wg, wu, wd = weights[7 * l: 7 * l + 7]
            n1, n_sub_att, n2, n_sub_ffn = self.norms[4 * l: 4 * l + 4]
            n = rmsnorm(x, n1)
            q = rope(linear(n, wq).view(B, T, H, D), self.cos, self.sin).transpose(1, 2)
            k = rope(linear(n, wk).view(B, T, KV, D), self.cos, self.sin).transpose(1, 2)
            v = linear(n, wv).view(B, T, KV, D).transpose(1, 2)
            if KV != H:
                k, v = k.repeat_interleave(H // KV, dim=1), v.repeat_interleave(H // KV, dim=1)
            att = causal_attention(q, k, v).transpose(1, 2).reshape(B, T, a.dim)
            x = x + linear(rmsnorm(att, n_sub_att), wo)
            n = rmsnorm(x, n2)
            h = F.silu(linear(n, wg)) * linear(n, wu)
            return x + linear(rmsnorm(h, n_sub_ffn), wd)

        x = self.embed[tokens]
        for l in range(a.layers):
            # --recompute: activation checkpointing, each block's input saved, the rest recomputed
            # in the backward (as dqt's --recompute).
            x = checkpoint(block, x, l, use_reentrant=False) if a.recompute else block(x, l)
        logits = rmsnorm(x, self.final_norm) @ self.head.T
        return F.cross_entropy(logits.float().reshape(B * T, -1), targets.reshape(-1))


def parameter_count(a):
    C, F_, V, KV = a.dim, a.ffn, a.vocab, a.kv_heads * (a.dim // a.heads)
    per_layer = 2 * C * C + 2 * KV * C + 3 * C * F_
    return a.layers * per_layer + 2 * V * C


def model_flops_per_token(a):
    """6 N (dense matmuls, forward and backward) plus causal attention's 6 L T C."""
    return 6 * parameter_count(a) + 6 * a.layers * a.seq * a.dim


def run(a, method, mode):
    device = torch.device(a.device)
    # Each run compiles from a clean slate: graphs and guards an earlier run of this process left
    # behind halved a later run's compiled throughput (bitnet 213k against 416-426k tokens/s alone).
    if hasattr(torch, "_dynamo"):  # torch 2 and later
        torch._dynamo.reset()
    if mode == "compile":  # one graph per weight shape of `linear` (7 shapes), not a fallback to eager
        for name in ("recompile_limit", "cache_size_limit"):
            if hasattr(torch._dynamo.config, name):
                setattr(torch._dynamo.config, name, 64)
    torch.manual_seed(0)
    model = Model(a, method, device)
    # Decay on matrices only, as dqt (norm gains keep theirs).
    groups = [{"params": [p for p in model.parameters() if p.dim() == 2], "weight_decay": 0.1},
              {"params": [p for p in model.parameters() if p.dim() < 2], "weight_decay": 0.0}]
    fused = {"fused": True} if device.type == "cuda" else {}
    optimizer = torch.optim.AdamW(groups, lr=a.lr, betas=(0.9, 0.95), **fused)
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    loss_fn = model.forward
    update_fn = dqt_update_tensors
    if mode == "compile":
        loss_fn = torch.compile(model.forward)
        update_fn = torch.compile(dqt_update_tensors)
    tokens = torch.randint(0, a.vocab, (a.batch, a.seq + 1), device=device)

    def step(t):
        weights = model.weights(dtype)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
            loss = loss_fn(tokens[:, :-1], tokens[:, 1:], weights)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        for coded in model.coded:
            dqt_update(update_fn, coded, a.lr, t)
            coded.dense = None
        return loss

    for t in range(1, a.warmup + 1):
        step(t)
    if device.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    for t in range(a.warmup + 1, a.warmup + a.steps + 1):
        loss = step(t)
    if device.type == "cuda":
        torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    tokens_per_s = a.batch * a.seq * a.steps / seconds
    result = {"method": method, "mode": mode, "recompute": a.recompute, "batch": a.batch, "seq": a.seq, "dim": a.dim,
              "layers": a.layers,
              "params": parameter_count(a), "tokens_per_s": round(tokens_per_s, 1), "loss": round(loss.item(), 4),
              "steps_timed": a.steps, "device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu",
              "torch": torch.__version__}
    if device.type == "cuda":
        result["peak_memory_mib"] = round(torch.cuda.max_memory_allocated() / 2 ** 20, 1)
        result["mfu_vs_989_tflops"] = round(tokens_per_s * model_flops_per_token(a) / 989e12, 4)
    return result


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--methods", nargs="+", default=["fp", "bitnet", "dqt-1.58", "dqt-8"])
    p.add_argument("--modes", nargs="+", default=["eager", "compile"])
    p.add_argument("--device", default="cuda")
    p.add_argument("--dim", type=int, default=768)
    p.add_argument("--layers", type=int, default=12)
    p.add_argument("--heads", type=int, default=12)
    p.add_argument("--kv-heads", type=int, default=0, help="0: as --heads")
    p.add_argument("--ffn", type=int, default=2048)
    p.add_argument("--vocab", type=int, default=32000)
    p.add_argument("--seq", type=int, default=1024)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--lr", type=float, default=1.5e-3)
    p.add_argument("--recompute", action="store_true",
                   help="activation checkpointing per block (torch.utils.checkpoint), as dqt's --recompute")
    p.add_argument("--out", help="append the JSON lines to this file too")
    a = p.parse_args()
    a.kv_heads = a.kv_heads or a.heads
    for method in a.methods:
        for mode in a.modes:
            if mode == "compile" and not hasattr(torch, "compile"):
                print(json.dumps({"method": method, "mode": mode, "skipped": "torch " + torch.__version__ + " has no compile"}))
                continue
            result = run(a, method, mode)
            line = json.dumps(result)
            print(line, flush=True)
            if a.out:
                with open(a.out, "a") as f:
                    f.write(line + "\n")
            if a.device == "cuda":
                torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
