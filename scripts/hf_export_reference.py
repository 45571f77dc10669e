#!/usr/bin/python3
"""An independent reader of dqt's Hugging Face exports: tiny models trained by dqt for 60
steps, exported with `dqt export --format safetensors`, then read here (config.json parsed
with json, safetensors parsed by hand) and run through a plain PyTorch LLaMA forward written
from transformers' conventions, not from dqt's. Writes tests/golden/hf_export/, which
tests/test_hf_export.cpp reads: dqt's logits on the same tokens must match these, and dqt's
export of what it imports must give the same bytes.

    apt-get install python3-torch libopenblas0-pthread
    OPENBLAS_CORETYPE=SkylakeX /usr/bin/python3 scripts/hf_export_reference.py --dqt build/dqt tests/golden/hf_export

Models (dim 32, 2 layers, 4 heads, context 16; trained on data/sotu, the default corpus):
  llama-fp       fp, no SubLN (LlamaForCausalLM), 2 kv heads, a 400-token sentencepiece BPE
                 tokenizer (tokenizer.model)
  bitnet-relu2   bitnet b1.58 (fp32 latents, ternarized online), SubLN, squared-ReLU gate, tied
                 embeddings, the byte tokenizer (tokenizer.json)
  dqt-ternary    dqt 1.58 bits (codes and scale), SubLN, byte tokenizer
  dqt-4-ends     dqt 4 bits with the embedding and the lm_head quantized too, BPE tokenizer

The forward: q and k rotated by rotate_half, inv_freq = theta^(-arange(0, d, 2) / d), RMSNorm
x / sqrt(mean(x^2) + eps) * w, attention scaled by 1 / sqrt(head_dim), causal, grouped-query
heads repeated; SubLN norms before o_proj and down_proj. A quantized linear reads the
quantization_config's description: the input row x (cast to fp32) becomes
a = round(x * s) with s = 127 / max(max|x|, 1e-5), and the output is (a . q) * (w_scale / s)
in fp32, with q and w_scale the codes and fl(1 / code_scale) (dqt), or the absmean ternary of
the latents and gamma (bitnet). Everything else is float64.
"""
import argparse
import json
import pathlib
import shutil
import struct
import subprocess
import sys
import tempfile

import torch

REPO = pathlib.Path(__file__).resolve().parent.parent
SHAPE = ["--dim", "32", "--layers", "2", "--heads", "4", "--ffn", "64", "--seq-len", "16"]
TRAIN = ["--batch", "4", "--steps", "60", "--seed", "7", "--quiet", "--no-sample", "--threads", "1"]
MODELS = {
    "llama-fp": ("bpe", ["--method", "fp", "--no-subln", "--kv-heads", "2"]),
    "bitnet-relu2": ("byte", ["--method", "bitnet", "--ffn-act", "relu2", "--tie-embeddings"]),
    "dqt-ternary": ("byte", ["--method", "dqt", "--bits", "1.58"]),
    "dqt-4-ends": ("bpe", ["--method", "dqt", "--bits", "4", "--quantize-embedding", "--quantize-head"]),
}
BATCH = 2
TERNARY_EPS = 1e-5
ACTIVATION_FLOOR = 1e-5

DTYPES = {"F32": (torch.float32, 4), "F64": (torch.float64, 8), "I8": (torch.int8, 1), "I32": (torch.int32, 4)}


def read_safetensors(path):
    data = path.read_bytes()
    (header_length,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + header_length])
    start = 8 + header_length
    tensors = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        dtype, _ = DTYPES[entry["dtype"]]
        begin, end = entry["data_offsets"]
        raw = bytearray(data[start + begin:start + end])
        tensors[name] = torch.frombuffer(raw, dtype=dtype).reshape(entry["shape"]).clone()
    return tensors


def write_safetensors(path, tensors):
    header, chunks, offset = {}, [], 0
    for name, (dtype, tensor) in tensors.items():
        raw = tensor.contiguous().numpy().tobytes()
        header[name] = {"dtype": dtype, "shape": list(tensor.shape), "data_offsets": [offset, offset + len(raw)]}
        chunks.append(raw)
        offset += len(raw)
    text = json.dumps(header).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    path.write_bytes(struct.pack("<Q", len(text)) + text + b"".join(chunks))


def quantize_activations(x):
    """dqt's int8 rows: (integers as float64, the fp32 scale of each row)."""
    x32 = x.to(torch.float32)
    peak = x32.abs().amax(dim=-1, keepdim=True).clamp_min(ACTIVATION_FLOOR)
    scale = torch.tensor(127.0, dtype=torch.float32) / peak
    return torch.round(x32 * scale).clamp(-128, 127).to(torch.float64), scale


class Linear:
    """A weight as the folder describes it: fp values, bitnet latents or dqt codes."""

    def __init__(self, tensors, prefix, kind):
        self.kind = kind
        if kind == "fp":
            self.weight = tensors[prefix + ".weight"].to(torch.float64)
        elif kind == "bitnet":
            latent = tensors[prefix + ".weight"]
            gamma = latent.to(torch.float64).abs().mean().to(torch.float32)
            inverse = torch.tensor(1.0, dtype=torch.float32) / (gamma + torch.tensor(TERNARY_EPS, dtype=torch.float32))
            self.codes = torch.round(latent * inverse).clamp(-1, 1).to(torch.float64)
            self.weight_scale = gamma
        else:
            self.codes = tensors[prefix + ".weight_codes"].to(torch.float64)
            code_scale = tensors[prefix + ".weight_code_scale"].to(torch.float32)[0]
            self.weight_scale = torch.tensor(1.0, dtype=torch.float32) / code_scale

    def __call__(self, x):
        if self.kind == "fp":
            return x @ self.weight.T
        a, scale = quantize_activations(x)
        factor = (self.weight_scale / scale).to(torch.float64)  # fp32 division, as dqt's epilogue
        return (a @ self.codes.T) * factor


def rms_norm(x, weight, eps):
    return x / torch.sqrt((x * x).mean(dim=-1, keepdim=True) + eps) * weight


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def forward(folder, tokens):
    config = json.loads((folder / "config.json").read_text())
    tensors = {}
    for path in sorted(folder.glob("*.safetensors")):
        if path.name != "expected.safetensors":
            tensors.update(read_safetensors(path))
    method = config.get("quantization_config", {}).get("method", {"method": "fp"})
    kind = {"fp": "fp", "bitnet": "bitnet", "dqt": "dqt"}[method["method"]]
    C, H = config["hidden_size"], config["num_attention_heads"]
    KV, D = config["num_key_value_heads"], config["hidden_size"] // config["num_attention_heads"]
    eps, theta = config["rms_norm_eps"], config["rope_theta"]
    relu2 = config["hidden_act"] == "relu2"
    subln = "model.layers.0.self_attn.attn_sub_norm.weight" in tensors
    w = {name: t.to(torch.float64) for name, t in tensors.items() if t.dtype == torch.float32}

    B, T = tokens.shape
    x = w["model.embed_tokens.weight"][tokens]
    inv_freq = 1.0 / (theta ** (torch.arange(0, D, 2, dtype=torch.float64) / D))
    angles = torch.outer(torch.arange(T, dtype=torch.float64), inv_freq)
    cos, sin = torch.cat((angles, angles), -1).cos(), torch.cat((angles, angles), -1).sin()
    causal = torch.full((T, T), float("-inf"), dtype=torch.float64).triu(1)
    for layer in range(config["num_hidden_layers"]):
        p = f"model.layers.{layer}."

        def linear(name):
            return Linear(tensors, p + name, kind)

        h = rms_norm(x, w[p + "input_layernorm.weight"], eps)
        q = linear("self_attn.q_proj")(h).view(B, T, H, D).transpose(1, 2)
        k = linear("self_attn.k_proj")(h).view(B, T, KV, D).transpose(1, 2)
        v = linear("self_attn.v_proj")(h).view(B, T, KV, D).transpose(1, 2)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        k, v = k.repeat_interleave(H // KV, dim=1), v.repeat_interleave(H // KV, dim=1)
        attention = torch.softmax(q @ k.transpose(-1, -2) / D ** 0.5 + causal, dim=-1) @ v
        attention = attention.transpose(1, 2).reshape(B, T, C)
        if subln:
            attention = rms_norm(attention, w[p + "self_attn.attn_sub_norm.weight"], eps)
        x = x + linear("self_attn.o_proj")(attention)
        h = rms_norm(x, w[p + "post_attention_layernorm.weight"], eps)
        gate = linear("mlp.gate_proj")(h)
        inner = (torch.relu(gate) ** 2 if relu2 else torch.nn.functional.silu(gate)) * linear("mlp.up_proj")(h)
        if subln:
            inner = rms_norm(inner, w[p + "mlp.ffn_sub_norm.weight"], eps)
        x = x + linear("mlp.down_proj")(inner)
    x = rms_norm(x, w["model.norm.weight"], eps)
    head = "model.embed_tokens" if config["tie_word_embeddings"] else "lm_head"
    return Linear(tensors, head, kind if method.get("quantize_head") else "fp")(x)


def run(command):
    subprocess.run([str(c) for c in command], check=True, cwd=REPO, stdout=subprocess.DEVNULL)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dqt", default=str(REPO / "build" / "dqt"))
    parser.add_argument("--corpus", default=str(REPO / "data" / "sotu"))
    parser.add_argument("out", type=pathlib.Path)
    args = parser.parse_args()
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    generator = torch.Generator().manual_seed(1234)
    with tempfile.TemporaryDirectory() as scratch:
        scratch = pathlib.Path(scratch)
        run([args.dqt, "data", "--corpus", args.corpus, "--out", scratch / "byte", "--tokenizer", "byte"])
        run([args.dqt, "data", "--corpus", args.corpus, "--out", scratch / "bpe", "--tokenizer", "bpe", "--vocab", "400"])
        for name, (tokenizer, flags) in MODELS.items():
            run([args.dqt, "train", "--data", scratch / tokenizer, "--out", scratch / name, *SHAPE, *flags, *TRAIN])
            folder = out / name
            shutil.rmtree(folder, ignore_errors=True)
            run([args.dqt, "export", scratch / name / "checkpoint.dqt", "--format", "safetensors", "--out", folder])
            vocab = json.loads((folder / "config.json").read_text())["vocab_size"]
            tokens = torch.randint(0, vocab, (BATCH, 16), generator=generator)
            logits = forward(folder, tokens)
            write_safetensors(folder / "expected.safetensors",
                              {"tokens": ("I32", tokens.to(torch.int32)), "logits": ("F64", logits)})
            print(f"{name}: logits {tuple(logits.shape)}, largest |logit| {logits.abs().max().item():.3f}")


if __name__ == "__main__":
    sys.exit(main())
