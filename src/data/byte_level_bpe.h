#pragma once
// Byte-level BPE from a Hugging Face tokenizer.json: the tokenizer of LLaMA 3, BitNet b1.58
// 2B4T and GPT-2. encode(text):
//   1. added tokens (<|begin_of_text|> and the like) are cut out of the text where they occur
//      literally and become their own ids;
//   2. the rest is split into pre-tokens by the pre-tokenizer's regex (PCRE2, Unicode
//      properties): a Split regex followed by ByteLevel without its own regex (LLaMA 3), or
//      ByteLevel with GPT-2's regex (without it: the whole text is one pre-token); bytes no
//      match covers (invalid UTF-8) form pre-tokens of their own, so any byte string encodes;
//   3. each pre-token's bytes become GPT-2's byte symbols (data/byte_symbols.h) and are merged
//      by the merge list's ranks, lowest first, every occurrence left to right; with
//      ignore_merges a pre-token that is itself in the vocabulary is one id.
// decode maps ids back to their bytes, so decode(encode(text)) == text for any bytes.
// What the file asks for beyond this (a normalizer, a prefix space, byte fallback, a
// continuing-subword prefix, dropout, added tokens that strip spaces) is refused with one line
// naming it. The vocabulary and the added tokens must cover ids 0 .. N-1, each once.
#include <memory>
#include <string>

#include "data/tokenizer.h"

namespace dqt {

// The tokenizer of a tokenizer.json's text; kind() "byte-level-bpe", serialize() that text.
// dqt::Error (one line, naming `source`) for anything it cannot read.
std::unique_ptr<Tokenizer> load_byte_level_bpe(const std::string& tokenizer_json, const std::string& source);

}  // namespace dqt
