#!/usr/bin/python3
"""GGUF files written by llama.cpp's own converter, for tests/test_llamacpp_gguf.cpp and
tests/test_llamacpp_interop.cpp: dqt must read a LLaMA GGUF it did not write (docs/FORMATS.md,
"GGUF files from llama.cpp").

    /usr/bin/python3 scripts/llamacpp_gguf_fixtures.py LLAMA_CPP_SOURCE tests/golden/llamacpp_gguf

LLAMA_CPP_SOURCE: llama.cpp's source tree, e.g. the one node-llama-cpp 3.22.1 bundles
(commit de3ff815): `git clone tools/llamacpp/node_modules/node-llama-cpp/llama/gitRelease.bundle
/tmp/llsrc`. Needs Debian's python3-numpy, python3-torch, python3-sentencepiece and
python3-tqdm. The converter imports `transformers` only to read config.json, and reads it
itself when that fails: a stub module that always fails stands in for it (no transformers on
Debian); placeholders stand in for the torch dtypes newer than Debian's torch 1.13 (below).
Running it again writes the same bytes.

Made here, all from fixed seeds:
  tokenizers       sentencepiece BPE models trained by sentencepiece (not by dqt) on
                   docs/METHOD.md, 384 pieces, <unk> 0, <s> 1, </s> 2, byte fallback, no
                   normalisation: "spm" as dqt trains them (no dummy prefix, which the HF
                   folder's tokenizer_config.json, add_prefix_space false, tells the converter),
                   "llama" as LLaMA's (a dummy prefix, pieces of runs of spaces, digits split;
                   no tokenizer_config.json, so llama.cpp prefixes a space as for LLaMA 2)
  gauss            LlamaForCausalLM, dim 256, 1 layer, 4 heads, 2 kv heads, FFN 256, untied
                   head, normal random weights, "spm" -> gauss-f32.gguf, gauss-f16.gguf,
                   gauss-q8_0.gguf
  ternary          the same shape with a tied head; every block linear is ternary codes times
                   one fp16 scale per matrix (what a BitNet model's dequantized weights are),
                   "spm" -> ternary-tq1_0.gguf, ternary-tq2_0.gguf
  tiny             dim 32, 2 heads, 1 kv head, FFN 64, tied, "llama" -> tiny-q8_0.gguf, small
                   enough to seed the GGUF fuzzer (fuzz/seeds/gguf/llamacpp_tiny_q8_0.gguf is a copy)
  expected.json    the probe texts and each tokenizer's ids for them, from sentencepiece
The HF folders themselves are not kept (the GGUF files are the fixtures).
"""
import json
import pathlib
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import sentencepiece

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from hf_reference import write_safetensors  # noqa: E402

REPO = pathlib.Path(__file__).resolve().parent.parent
PROBE_TEXTS = ["The weights exist only as codes.", "caf\u00e9 1789-2024,\n  two  spaces\tand a tab",
               "    indented = 4 spaces;   three",
               "Stochastic rounding: E[q] = w / s", ""]
CONFIG = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 256,
    "num_hidden_layers": 1, "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 256,
    "vocab_size": 384, "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "hidden_act": "silu",
    "max_position_embeddings": 128, "torch_dtype": "float32", "bos_token_id": 1, "eos_token_id": 2,
}
# The converter's dtype tables name dtypes newer than Debian's torch 1.13 (float8, uint16-64);
# none of them occurs in these F32 files, so a placeholder object stands in for each.
TORCH_PLACEHOLDERS = """import torch
for name in ("float8_e4m3fn", "float8_e5m2", "float8_e8m0fnu", "uint16", "uint32", "uint64"):
    if not hasattr(torch, name):
        setattr(torch, name, type(name, (), {})())
"""
# name -> (outtypes, tokenizer, config changes)
OUTPUTS = {
    "gauss": (["f32", "f16", "q8_0"], "spm", {"tie_word_embeddings": False}),
    "ternary": (["tq1_0", "tq2_0"], "spm", {"tie_word_embeddings": True}),
    "tiny": (["q8_0"], "llama", {"tie_word_embeddings": True, "hidden_size": 32, "num_attention_heads": 2,
                                 "num_key_value_heads": 1, "intermediate_size": 64}),
}

TOKENIZERS = {
    "spm": {"add_dummy_prefix": False},
    "llama": {"add_dummy_prefix": True, "allow_whitespace_only_pieces": True, "split_digits": True},
}


def train_tokenizer(folder, name):
    sentencepiece.SentencePieceTrainer.train(
        input=str(REPO / "docs" / "METHOD.md"), model_prefix=str(folder / name), model_type="bpe",
        vocab_size=CONFIG["vocab_size"], byte_fallback=True, normalization_rule_name="identity",
        remove_extra_whitespaces=False, num_threads=1, minloglevel=2, **TOKENIZERS[name])
    (folder / f"{name}.vocab").unlink()
    return sentencepiece.SentencePieceProcessor(model_file=str(folder / f"{name}.model"))


def weights(kind, config, rng):
    """HF tensor name -> float32 array."""
    C, F, V = config["hidden_size"], config["intermediate_size"], config["vocab_size"]
    H, KV = config["num_attention_heads"], config["num_key_value_heads"]
    D = C // H
    out = {"model.embed_tokens.weight": 0.1 * rng.standard_normal((V, C))}

    def linear(name, shape):
        if kind != "ternary":
            out[name] = 0.1 * rng.standard_normal(shape)
        else:  # ternary codes (about a third zero) times an fp16-exact scale
            codes = rng.integers(-1, 2, size=shape)
            out[name] = codes * float(np.float16(rng.uniform(0.02, 0.2)))

    for l in range(config["num_hidden_layers"]):
        p = f"model.layers.{l}."
        out[p + "input_layernorm.weight"] = 1.0 + 0.1 * rng.standard_normal(C)
        linear(p + "self_attn.q_proj.weight", (H * D, C))
        linear(p + "self_attn.k_proj.weight", (KV * D, C))
        linear(p + "self_attn.v_proj.weight", (KV * D, C))
        linear(p + "self_attn.o_proj.weight", (C, H * D))
        out[p + "post_attention_layernorm.weight"] = 1.0 + 0.1 * rng.standard_normal(C)
        linear(p + "mlp.gate_proj.weight", (F, C))
        linear(p + "mlp.up_proj.weight", (F, C))
        linear(p + "mlp.down_proj.weight", (C, F))
    out["model.norm.weight"] = 1.0 + 0.1 * rng.standard_normal(C)
    if not config["tie_word_embeddings"]:
        out["lm_head.weight"] = 0.1 * rng.standard_normal((V, C))
    return {name: value.astype(np.float32) for name, value in out.items()}


def convert(llama_cpp, folder, outtype, outfile, stub):
    env = {"PYTHONPATH": f"{stub}:{llama_cpp / 'gguf-py'}", "PATH": "/usr/bin:/bin"}
    subprocess.run([sys.executable, str(llama_cpp / "convert_hf_to_gguf.py"), str(folder), "--outtype", outtype,
                    "--outfile", str(outfile)], env=env, check=True, stdout=subprocess.DEVNULL)


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    llama_cpp, out = pathlib.Path(sys.argv[1]).resolve(), pathlib.Path(sys.argv[2])
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as scratch:
        scratch = pathlib.Path(scratch)
        stub = scratch / "stub"
        (stub / "transformers").mkdir(parents=True)
        (stub / "transformers" / "__init__.py").write_text(
            "class AutoConfig:\n    @staticmethod\n    def from_pretrained(*args, **kwargs):\n"
            "        raise RuntimeError('transformers stub: read config.json')\n")
        (stub / "sitecustomize.py").write_text(TORCH_PLACEHOLDERS)
        tokenizers = {name: train_tokenizer(scratch, name) for name in TOKENIZERS}
        for index, (kind, (outtypes, tokenizer, changes)) in enumerate(OUTPUTS.items()):
            config = dict(CONFIG, **changes)
            folder = scratch / kind
            folder.mkdir()
            (folder / "config.json").write_text(json.dumps(config, indent=2) + "\n")
            shutil.copy(scratch / f"{tokenizer}.model", folder / "tokenizer.model")
            if not TOKENIZERS[tokenizer]["add_dummy_prefix"]:
                # Without it the converter writes no tokenizer.ggml.add_space_prefix, and llama.cpp
                # then prefixes a space (LLaMA's dummy prefix) the tokenizer was trained without.
                (folder / "tokenizer_config.json").write_text(json.dumps({"add_prefix_space": False}) + "\n")
            tensors = weights(kind, config, np.random.default_rng(7 + index))
            write_safetensors(folder / "model.safetensors",
                              {n: ("F32", v.shape, v.tobytes()) for n, v in tensors.items()})
            for outtype in outtypes:
                target = out / f"{kind}-{outtype}.gguf"
                convert(llama_cpp, folder, outtype, target, stub)
                print(f"{target}: {target.stat().st_size} bytes")
    expected = {"texts": PROBE_TEXTS}
    expected.update({name: [t.encode(text) for text in PROBE_TEXTS] for name, t in tokenizers.items()})
    (out / "expected.json").write_text(json.dumps(expected, indent=1) + "\n")


if __name__ == "__main__":
    main()
