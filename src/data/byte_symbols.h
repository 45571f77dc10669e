#pragma once
// GPT-2's byte-to-character map, which byte-level BPE vocabularies use (llama.cpp's "gpt2"
// vocabularies, Hugging Face's ByteLevel tokenizer.json): printable bytes stand for
// themselves, the others (in order) for U+0100 onwards. dqt's byte tokenizer is such a
// vocabulary of the 256 symbols with no merges.
#include <string>

namespace dqt {

// The UTF-8 text of byte b's symbol, b in [0, 256).
const std::string& gpt2_byte_symbol(int byte);

}  // namespace dqt
