#!/usr/bin/python3
"""Small byte-level BPE tokenizer.json files and their reference encodings, for
tests/test_byte_level_bpe.cpp: dqt's reader (src/data/byte_level_bpe.h) must give the ids that
tokenizers.js (tools/hf-tokenizers, independent of dqt) gives.

    apt-get install python3-regex && (cd tools/hf-tokenizers && npm ci)
    /usr/bin/python3 scripts/make_tokenizer_json_fixture.py tests/golden/tokenizer_json

The BPE is trained here (600 merges, the plain algorithm: count adjacent symbol pairs over the
pre-tokenized words, merge the most frequent, repeat) on the first 40 State of the Union
addresses (data/sotu, public domain), so no third-party vocabulary is committed. Files:
  llama3_style.json  LLaMA 3's layout: a Split pre-tokenizer with LLaMA 3's regex, then
                     ByteLevel without a regex; ignore_merges; two added special tokens
  gpt2_style.json    GPT-2's layout: ByteLevel with its own regex, merges as [left, right] pairs
  expected.json      the probe texts and, for each file, tokenizers.js's ids of each text
"""
import collections
import json
import pathlib
import subprocess
import sys

import regex

REPO = pathlib.Path(__file__).resolve().parent.parent
LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                  r"|\s*[\r\n]+|\s+(?!\S)|\s+")
MERGES = 600
ADDED = ["<|begin_of_text|>", "<|end_of_text|>"]
PROBES = [
    "Fellow citizens of the Senate and House of Representatives:",
    "I'll say it: DON'T we've THEY'RE you'd it's.",
    "Numbers 1, 12, 123, 1234567 and 3.14159 and 1,000,000.",
    "  leading spaces,   runs   of spaces,\ttabs\t\tand\nnew\n\n\nlines \n \n",
    "caf\u00e9 na\u00efve \u00fcber \u0441\u043e\u044e\u0437 \u0627\u0644\u0633\u0644\u0627\u0645 \u4e2d\u6587\u5b57 \u65e5\u672c\u8a9e",
    "emoji \U0001F642\U0001F680 and symbols \u20ac\u00a3\u00a5 \u2014 \u201cquoted\u201d",
    "<|begin_of_text|>The union<|end_of_text|><|end_of_text|> after",
    "almost special <|begin_of_text| and <|end_of_text",
    "",
    " ",
    "\n",
    "The State of the Union is strong. We shall endure; the Congress shall act.",
]


def gpt2_symbols():
    printable = [b for b in range(256) if 0x21 <= b <= 0x7e or 0xa1 <= b <= 0xac or 0xae <= b <= 0xff]
    symbols, extra = {}, 0
    for b in range(256):
        if b in printable:
            symbols[b] = chr(b)
        else:
            symbols[b] = chr(0x100 + extra)
            extra += 1
    return symbols


def train(texts, symbols):
    words = collections.Counter()
    for text in texts:
        for piece in regex.findall(LLAMA3_PATTERN, text):
            words[tuple(symbols[b] for b in piece.encode("utf-8"))] += 1
    vocab = {symbols[b]: b for b in range(256)}
    merges = []
    for _ in range(MERGES):
        pairs = collections.Counter()
        for word, count in words.items():
            for pair in zip(word, word[1:]):
                pairs[pair] += count
        if not pairs:
            break
        best = max(pairs.items(), key=lambda item: (item[1], item[0]))[0]
        merges.append(best)
        vocab.setdefault(best[0] + best[1], len(vocab))
        merged = collections.Counter()
        for word, count in words.items():
            out, i = [], 0
            while i < len(word):
                if i + 1 < len(word) and (word[i], word[i + 1]) == best:
                    out.append(word[i] + word[i + 1])
                    i += 2
                else:
                    out.append(word[i])
                    i += 1
            merged[tuple(out)] += count
        words = merged
    return vocab, merges


def tokenizer_json(vocab, merges, style):
    added = [{"id": len(vocab) + i, "content": content, "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": True} for i, content in enumerate(ADDED)]
    if style == "llama3":
        pre = {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": LLAMA3_PATTERN}, "behavior": "Isolated", "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]}
        merge_list = [f"{a} {b}" for a, b in merges]
    else:
        pre = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
        merge_list = [[a, b] for a, b in merges]
    return {"version": "1.0", "truncation": None, "padding": None, "added_tokens": added, "normalizer": None,
            "pre_tokenizer": pre, "post_processor": None,
            "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
            "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                      "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
                      "ignore_merges": style == "llama3", "vocab": vocab, "merges": merge_list}}


def main():
    out = pathlib.Path(sys.argv[1]).resolve()
    out.mkdir(parents=True, exist_ok=True)
    documents = sorted((REPO / "data" / "sotu").glob("*.txt"))[:40]
    vocab, merges = train([d.read_text(encoding="utf-8") for d in documents], gpt2_symbols())
    (out / "probes.json").write_text(json.dumps(PROBES, ensure_ascii=False))
    expected = {"texts": PROBES}
    for style in ["llama3", "gpt2"]:
        path = out / f"{style}_style.json"
        path.write_text(json.dumps(tokenizer_json(vocab, merges, style), ensure_ascii=False, indent=1))
        result = subprocess.run(["node", str(REPO / "tools" / "hf-tokenizers" / "encode.mjs"), str(path),
                                 str(out / "probes.json")], check=True, capture_output=True, text=True)
        expected[style] = json.loads(result.stdout)["ids"]
    (out / "probes.json").unlink()
    (out / "expected.json").write_text(json.dumps(expected, ensure_ascii=False, indent=1))
    print(f"{len(vocab)} tokens, {len(merges)} merges, {len(PROBES)} probes -> {out}")


if __name__ == "__main__":
    main()
