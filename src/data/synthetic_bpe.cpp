#include "data/synthetic_bpe.h"

#include <string>

#include "core/error.h"
#include "data/byte_level_bpe.h"
#include "data/byte_level_bpe_parts.h"
#include "data/byte_symbols.h"

namespace dqt {

std::unique_ptr<Tokenizer> make_synthetic_byte_level_bpe(int vocab_size) {
    constexpr int kBytes = 256, kPairs = kBytes * kBytes;
    require(vocab_size >= kBytes && vocab_size <= (1 << 24),
            "a synthetic byte-level vocabulary has 256 to 16,777,216 tokens, not " + std::to_string(vocab_size));
    ByteLevelBpeParts parts;
    parts.pre = ByteLevelBpeParts::PreTokenizer::gpt2;
    parts.tokens.reserve(static_cast<size_t>(vocab_size));
    for (int b = 0; b < kBytes; ++b) parts.tokens.push_back({gpt2_byte_symbol(b)});
    // Token 256 + i: a pair (i < 65,536: byte i / 256, byte i % 256), then pair (i - 65,536) / 256
    // followed by byte (i - 65,536) % 256. Each is a merge of two tokens made before it.
    for (int i = 0; kBytes + i < vocab_size; ++i) {
        const bool pair = i < kPairs;
        const int rest = pair ? i : i - kPairs;
        const std::string left = pair ? gpt2_byte_symbol(rest / kBytes) : parts.tokens[kBytes + rest / kBytes].text;
        const std::string& right = gpt2_byte_symbol(rest % kBytes);
        parts.merges.push_back(left + " " + right);
        parts.tokens.push_back({left + right});
    }
    return load_byte_level_bpe(byte_level_bpe_json(parts), "a synthetic vocabulary of " + std::to_string(vocab_size));
}

}  // namespace dqt
