#!/usr/bin/python3
"""Tiny models in Hugging Face's layout, with logits computed here as transformers computes
them, for tests/test_hf_import.cpp: dqt must read the folder (config.json, safetensors shards
with their index) and give the same logits.

    /usr/bin/python3 scripts/hf_reference.py tests/golden/hf

Each model is a folder: config.json, model-00001-of-00002.safetensors and
model-00002-of-00002.safetensors (weights split between two shards, as large checkpoints are)
with model.safetensors.index.json, and expected.safetensors beside them (not part of the HF
layout): the input tokens and the float64 logits. Models:
  llama    LlamaForCausalLM: SiLU-gated MLP, grouped-query attention, an untied lm_head,
           weights stored in BF16 and F16 (norms in F32), rope_theta 500000
  bitnet   BitNetForCausalLM's shape: attn_sub_norm and ffn_sub_norm, squared-ReLU gate
           (hidden_act "relu2"), tied embeddings, F32

The forward is written from the transformers modeling code's conventions, not from dqt's:
q and k rotated by rotate_half (the two halves of each head, not adjacent pairs), inv_freq =
theta^(-arange(0, d, 2) / d), RMSNorm x / sqrt(mean(x^2) + eps) * w, attention scaled by
1 / sqrt(head_dim), causal. Weights are drawn from numpy's generator with a fixed seed,
rounded to their stored dtype first, so the reference uses exactly the stored values.
"""
import json
import pathlib
import struct
import sys

import numpy as np

TOKENS = [[5, 17, 250, 3, 99, 42, 7, 280, 1, 0, 64, 128], [299, 2, 2, 2, 150, 77, 31, 8, 9, 10, 11, 12]]

MODELS = {
    "llama": {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 96,
        "vocab_size": 300, "rms_norm_eps": 1e-5, "rope_theta": 500000.0, "hidden_act": "silu",
        "max_position_embeddings": 64, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
    },
    "bitnet": {
        "architectures": ["BitNetForCausalLM"], "model_type": "bitnet", "hidden_size": 64,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 1, "intermediate_size": 80,
        "vocab_size": 300, "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "hidden_act": "relu2",
        "max_position_embeddings": 32, "tie_word_embeddings": True, "torch_dtype": "float32",
    },
}


def to_bf16(x):
    """Round-to-nearest-even bf16, returned as (float32 values, uint16 bits)."""
    bits = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
    return (rounded.astype(np.uint32) << 16).view(np.float32), rounded


def stored(x, dtype):
    """The values as stored in `dtype` (F32, F16 or BF16), and their bytes."""
    if dtype == "F32":
        v = x.astype(np.float32)
        return v, v.tobytes()
    if dtype == "F16":
        v = x.astype(np.float16)
        return v.astype(np.float32), v.tobytes()
    values, bits = to_bf16(x)
    return values, bits.tobytes()


def write_safetensors(path, tensors):
    """tensors: name -> (dtype, shape, bytes), written in the given order."""
    header, offset, blobs = {}, 0, []
    for name, (dtype, shape, blob) in tensors.items():
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + len(blob)]}
        offset += len(blob)
        blobs.append(blob)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for blob in blobs:
            f.write(blob)


def make_weights(name, c, rng):
    """HF tensor name -> (float64 values as stored, dtype, bytes)."""
    C, F, V = c["hidden_size"], c["intermediate_size"], c["vocab_size"]
    H, KV = c["num_attention_heads"], c["num_key_value_heads"]
    D = C // H
    matrix_dtype = "F32" if c["torch_dtype"] == "float32" else None
    out = {}

    def add(tensor_name, shape, scale, dtype, around=0.0):
        values, blob = stored(around + scale * rng.standard_normal(shape), dtype)
        out[tensor_name] = (values.astype(np.float64), dtype, blob)

    add("model.embed_tokens.weight", (V, C), 0.5, matrix_dtype or "BF16")
    for l in range(c["num_hidden_layers"]):
        p = f"model.layers.{l}."
        # Alternate BF16 and F16 between layers, so both conversions are read.
        dtype = matrix_dtype or ("BF16" if l % 2 == 0 else "F16")
        add(p + "input_layernorm.weight", (C,), 0.1, "F32", around=1.0)
        add(p + "self_attn.q_proj.weight", (H * D, C), 0.15, dtype)
        add(p + "self_attn.k_proj.weight", (KV * D, C), 0.15, dtype)
        add(p + "self_attn.v_proj.weight", (KV * D, C), 0.15, dtype)
        add(p + "self_attn.o_proj.weight", (C, H * D), 0.15, dtype)
        add(p + "post_attention_layernorm.weight", (C,), 0.1, "F32", around=1.0)
        add(p + "mlp.gate_proj.weight", (F, C), 0.15, dtype)
        add(p + "mlp.up_proj.weight", (F, C), 0.15, dtype)
        add(p + "mlp.down_proj.weight", (C, F), 0.15, dtype)
        if name == "bitnet":
            add(p + "self_attn.attn_sub_norm.weight", (C,), 0.1, "F32", around=1.0)
            add(p + "mlp.ffn_sub_norm.weight", (F,), 0.1, "F32", around=1.0)
    add("model.norm.weight", (C,), 0.1, "F32", around=1.0)
    if not c["tie_word_embeddings"]:
        add("lm_head.weight", (V, C), 0.15, matrix_dtype or "BF16")
    return out


def rms_norm(x, w, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def rotate_half(x):
    half = x.shape[-1] // 2
    return np.concatenate([-x[..., half:], x[..., :half]], axis=-1)


def forward(name, c, w, tokens):
    """Logits (T, V) of one sequence, in float64."""
    C, H, KV = c["hidden_size"], c["num_attention_heads"], c["num_key_value_heads"]
    D, T, eps = C // H, len(tokens), c["rms_norm_eps"]
    g = lambda n: w[n][0]
    x = g("model.embed_tokens.weight")[tokens]
    inv_freq = 1.0 / (c["rope_theta"] ** (np.arange(0, D, 2, dtype=np.float64) / D))
    angles = np.outer(np.arange(T, dtype=np.float64), inv_freq)
    cos, sin = np.cos(np.concatenate([angles, angles], -1)), np.sin(np.concatenate([angles, angles], -1))
    mask = np.triu(np.full((T, T), -np.inf), 1)
    for l in range(c["num_hidden_layers"]):
        p = f"model.layers.{l}."
        h = rms_norm(x, g(p + "input_layernorm.weight"), eps)
        q = (h @ g(p + "self_attn.q_proj.weight").T).reshape(T, H, D).transpose(1, 0, 2)
        k = (h @ g(p + "self_attn.k_proj.weight").T).reshape(T, KV, D).transpose(1, 0, 2)
        v = (h @ g(p + "self_attn.v_proj.weight").T).reshape(T, KV, D).transpose(1, 0, 2)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        k, v = np.repeat(k, H // KV, axis=0), np.repeat(v, H // KV, axis=0)
        scores = q @ k.transpose(0, 2, 1) / np.sqrt(D) + mask
        scores = np.exp(scores - scores.max(-1, keepdims=True))
        attention = (scores / scores.sum(-1, keepdims=True)) @ v
        attention = attention.transpose(1, 0, 2).reshape(T, H * D)
        if name == "bitnet":
            attention = rms_norm(attention, g(p + "self_attn.attn_sub_norm.weight"), eps)
        x = x + attention @ g(p + "self_attn.o_proj.weight").T
        h = rms_norm(x, g(p + "post_attention_layernorm.weight"), eps)
        gate, up = h @ g(p + "mlp.gate_proj.weight").T, h @ g(p + "mlp.up_proj.weight").T
        if c["hidden_act"] == "relu2":
            inner = np.maximum(gate, 0.0) ** 2 * up
        else:
            inner = gate / (1.0 + np.exp(-gate)) * up
        if name == "bitnet":
            inner = rms_norm(inner, g(p + "mlp.ffn_sub_norm.weight"), eps)
        x = x + inner @ g(p + "mlp.down_proj.weight").T
    x = rms_norm(x, g("model.norm.weight"), eps)
    head = g("model.embed_tokens.weight") if c["tie_word_embeddings"] else g("lm_head.weight")
    return x @ head.T


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    root = pathlib.Path(sys.argv[1])
    for index, (name, config) in enumerate(MODELS.items()):
        folder = root / name
        folder.mkdir(parents=True, exist_ok=True)
        weights = make_weights(name, config, np.random.default_rng(2024 + index))
        (folder / "config.json").write_text(json.dumps(config, indent=2) + "\n")
        names = list(weights)
        shards = [names[: len(names) // 2], names[len(names) // 2:]]
        weight_map = {}
        for s, part in enumerate(shards):
            file = f"model-{s + 1:05d}-of-{len(shards):05d}.safetensors"
            write_safetensors(folder / file, {n: (weights[n][1], weights[n][0].shape, weights[n][2]) for n in part})
            weight_map.update({n: file for n in part})
        total = sum(len(weights[n][2]) for n in names)
        (folder / "model.safetensors.index.json").write_text(
            json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map}, indent=2) + "\n")
        logits = np.stack([forward(name, config, weights, np.array(t)) for t in TOKENS])
        tokens = np.array(TOKENS, dtype=np.int32)
        write_safetensors(folder / "expected.safetensors",
                          {"tokens": ("I32", tokens.shape, tokens.tobytes()),
                           "logits": ("F64", logits.shape, logits.astype(np.float64).tobytes())})
        print(f"{folder}: {len(names)} tensors, logits {logits.shape}, |logits| max {np.abs(logits).max():.3f}")


if __name__ == "__main__":
    main()
