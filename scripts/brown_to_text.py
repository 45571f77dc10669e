#!/usr/bin/env python3
"""Turns the tagged Brown Corpus files (word/tag tokens) into plain text, one .txt per sample.

    python3 scripts/brown_to_text.py TAGGED_DIR OUT_DIR

Each token "word/tag" keeps its word; the corpus's quote marks `` and '' become ";
punctuation attaches to the word before it (or after it, for opening brackets and quotes);
each sentence becomes a line, with a blank line between sentences.
"""
import pathlib
import re
import sys

CLOSING = {",", ".", ";", ":", "!", "?", ")", "]", "'s", "n't", "%"}
OPENING = {"(", "["}


def words_of(line):
    for token in line.split():
        word = token.rsplit("/", 1)[0] if "/" in token else token
        yield {"``": '"', "''": '"'}.get(word, word)


def sentence_text(words):
    out = ""
    quote_open = False
    attach_next = False
    for word in words:
        joins_before = word in CLOSING or (word == '"' and quote_open)
        if out and not joins_before and not attach_next:
            out += " "
        out += word
        attach_next = word in OPENING or (word == '"' and not quote_open)
        if word == '"':
            quote_open = not quote_open
    return out


def convert(tagged_path):
    # Each sentence is a tab-indented line of its own (paragraphs are not marked): each becomes
    # a paragraph of its own, separated by a blank line.
    sentences = []
    for line in tagged_path.read_text(encoding="ascii", errors="replace").splitlines():
        if line.strip():
            sentences.append(re.sub(r"\s+", " ", sentence_text(words_of(line))).strip())
    return "\n\n".join(s for s in sentences if s) + "\n"


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: brown_to_text.py TAGGED_DIR OUT_DIR")
    tagged_dir, out_dir = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
    samples = sorted(p for p in tagged_dir.iterdir() if re.fullmatch(r"c[a-r]\d\d", p.name))
    if not samples:
        sys.exit(f"brown_to_text: no Brown samples (ca01 ... cr09) in {tagged_dir}")
    out_dir.mkdir(parents=True, exist_ok=True)
    for sample in samples:
        (out_dir / f"{sample.name}.txt").write_text(convert(sample), encoding="utf-8")


if __name__ == "__main__":
    main()
