#pragma once
// Tokenizers: text <-> token ids. Every kind round-trips any byte string exactly:
// decode(encode(text)) == text, for valid UTF-8 and for arbitrary bytes alike; a sentencepiece
// model with a dummy prefix (LLaMA's) gives " " + text back, the space its encoding added.
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace dqt {

class Tokenizer {
public:
    virtual ~Tokenizer();
    virtual std::vector<int32_t> encode(std::string_view text) const = 0;
    // Token by token: the text of a sequence is its tokens' texts joined, so a caller may
    // decode a growing sequence one token at a time. Throws dqt::Error for an id outside
    // [0, vocab_size()).
    virtual std::string decode(std::span<const int32_t> tokens) const = 0;
    virtual int vocab_size() const = 0;
    // "byte", "bpe" (sentencepiece, trained by dqt) or "byte-level-bpe" (a Hugging Face
    // tokenizer.json: data/byte_level_bpe.h)
    virtual std::string kind() const = 0;
    virtual std::string serialize() const = 0;  // bytes stored in checkpoints; empty for "byte"
};

// Token = byte value; vocabulary 256.
std::unique_ptr<Tokenizer> make_byte_tokenizer();

// Trains a sentencepiece BPE model in memory on texts, with exactly vocab_size tokens:
// 1 unknown + 256 byte-fallback tokens + characters and merges. Byte fallback covers every
// character the model lacks and no normalisation is applied, so any text round-trips.
// Throws dqt::Error when vocab_size does not fit the texts (too small or too large).
std::unique_ptr<Tokenizer> train_bpe_tokenizer(const std::vector<std::string>& texts, int vocab_size, int threads);
// The same from texts pulled one at a time: `texts` puts the next one in its argument and
// returns false at the end (a corpus larger than memory is not held whole).
using TextSource = std::function<bool(std::string& text)>;
std::unique_ptr<Tokenizer> train_bpe_tokenizer(const TextSource& texts, int vocab_size, int threads);

// The same kind and the same serialized bytes: the two map text to the same ids.
bool same_tokenizer(const Tokenizer& a, const Tokenizer& b);

// Rebuilds a tokenizer from kind() and serialize(); dqt::Error for an unknown kind or bad data.
std::unique_ptr<Tokenizer> load_tokenizer(const std::string& kind, const std::string& serialized);

// tokenizer.bin (little-endian): "DQTTOKEN", u32 version (1), u32 kind length, kind,
// u64 blob length, blob (serialize()), u32 CRC-32 of all bytes before it. Written atomically.
void save_tokenizer_file(const std::string& path, const Tokenizer& tokenizer);
std::unique_ptr<Tokenizer> load_tokenizer_file(const std::string& path);

}  // namespace dqt
