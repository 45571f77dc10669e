#!/usr/bin/env python3
"""Writes the safetensors reader's fuzz seeds (called by scripts/make_fuzz_seeds.sh): small
valid files in Hugging Face's layout with every dtype the importers convert, metadata, a scalar
and an empty tensor; and a file with no tensors at all.

    python3 scripts/safetensors_seeds.py OUT_DIR
"""
import json
import pathlib
import struct
import sys


def write(path, tensors, metadata=None):
    header, offset, data = {}, 0, b""
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, dtype, shape, payload in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(payload)]}
        offset += len(payload)
        data += payload
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    path.write_bytes(struct.pack("<Q", len(text)) + text + data)


def main():
    out = pathlib.Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    write(out / "every_dtype.safetensors", [
        ("model.embed_tokens.weight", "F32", [3, 2], struct.pack("<6f", 0.5, -1.0, 2.0, 0.0, 1e-3, -7.25)),
        ("model.layers.0.mlp.up_proj.weight", "BF16", [2, 2], struct.pack("<4H", 0x3F80, 0xBF80, 0x4000, 0x0000)),
        ("model.norm.weight", "F16", [2], struct.pack("<2H", 0x3C00, 0x3800)),
        ("lm_head.weight", "F64", [1, 2], struct.pack("<2d", 0.25, -0.125)),
        ("position_ids", "I32", [4], struct.pack("<4i", 0, 1, 2, 3)),
        ("scalar", "F32", [], struct.pack("<f", 3.0)),
        ("empty", "F32", [0, 4], b""),
        ("mask", "BOOL", [2], b"\x01\x00"),
    ], metadata={"format": "pt"})
    write(out / "no_tensors.safetensors", [])


if __name__ == "__main__":
    main()
