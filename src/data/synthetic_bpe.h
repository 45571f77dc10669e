#pragma once
// A byte-level BPE vocabulary of any size with no text behind it, for timing a model whose head
// has a real vocabulary's rows (BitNet b1.58 2B4T's 128,256) where no tokenizer file is at hand:
// `dqt bench generate` exports its random model with it, and llama.cpp loads it as a "gpt2"
// vocabulary like any other.
#include <memory>

#include "data/tokenizer.h"

namespace dqt {

// Exactly vocab_size tokens (>= 256): the 256 byte symbols (ids 0-255), then every pair of them
// (id 256 + 256 * first + second), then every pair followed by a byte, in that order, each a
// merge of two earlier tokens; GPT-2's pre-tokenizer. kind() "byte-level-bpe". dqt::Error for a
// size outside [256, 2^24].
std::unique_ptr<Tokenizer> make_synthetic_byte_level_bpe(int vocab_size);

}  // namespace dqt
