#include "data/tokenizer.h"

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <unordered_map>

#include "core/checksum.h"
#include "core/error.h"
#include "data/byte_level_bpe.h"
#include "data/corpus.h"
#include "data/sentencepiece_proto.h"
#include "io/atomic_file.h"

namespace dqt {

Tokenizer::~Tokenizer() = default;

namespace {

void require_in_vocab(int32_t token, int vocab_size) {
    if (token < 0 || token >= vocab_size) {  // not require(): no message built per token
        throw Error("token id " + std::to_string(token) + " is outside the tokenizer's vocabulary of " +
                    std::to_string(vocab_size) + ": tokens and tokenizer do not match");
    }
}

class ByteTokenizer final : public Tokenizer {
public:
    std::vector<int32_t> encode(std::string_view text) const override {
        std::vector<int32_t> tokens(text.size());
        for (size_t i = 0; i < text.size(); ++i) tokens[i] = static_cast<uint8_t>(text[i]);
        return tokens;
    }
    std::string decode(std::span<const int32_t> tokens) const override {
        std::string text(tokens.size(), '\0');
        for (size_t i = 0; i < tokens.size(); ++i) {
            require_in_vocab(tokens[i], 256);
            text[i] = static_cast<char>(tokens[i]);
        }
        return text;
    }
    int vocab_size() const override { return 256; }
    std::string kind() const override { return "byte"; }
    std::string serialize() const override { return {}; }
};

// sentencepiece stores spaces as U+2581; a literal U+2581 in the input would decode as a space.
constexpr std::string_view kSpaceMark = "\xE2\x96\x81";

// A sentencepiece BPE model whose encode/decode are exact on any bytes. sentencepiece alone
// is exact only on valid UTF-8 without U+2581 (it replaces invalid bytes with U+FFFD and
// reads U+2581 as a space), so those bytes bypass it as byte-fallback tokens, and decoding
// maps each id straight to its bytes.
//
// A model with a dummy prefix (LLaMA's: add_dummy_prefix, which llama.cpp calls
// add_space_prefix) encodes " " + text, as sentencepiece and llama.cpp do; its tokens decode to
// that text, the space included (a sequence's text stays its tokens' texts joined).
//
// Speed: a model whose pieces hold no space after their first character (dqt trains with
// split_by_whitespace) encodes word by word (a word = a space and what follows up to the next
// space), each distinct word once per encode() call: about 4x faster on English text than
// encoding the whole text, with identical tokens. A model with pieces spanning spaces (LLaMA's
// runs of spaces) encodes each valid stretch of text whole.
class BpeTokenizer final : public Tokenizer {
public:
    explicit BpeTokenizer(std::string model_proto) : proto_(std::move(model_proto)) {
        load(proto_);
        // The prefix is added here, so that the word-by-word and byte-fallback paths see it once.
        std::vector<std::string> probe_pieces;
        dummy_prefix_ = processor_.Encode("a", &probe_pieces).ok() && !probe_pieces.empty() &&
                        std::string_view(probe_pieces[0]).starts_with(kSpaceMark);
        if (dummy_prefix_) load(sentencepiece_without_dummy_prefix(proto_));
        const int vocab = processor_.GetPieceSize();
        for (int byte = 0; byte < 256; ++byte) {
            char piece[8];
            std::snprintf(piece, sizeof piece, "<0x%02X>", byte);
            byte_ids_[byte] = processor_.PieceToId(piece);
            require(
                processor_.IsByte(byte_ids_[byte]),
                "bpe tokenizer has no byte-fallback pieces (not made by dqt): re-create the dataset with `dqt data`");
        }
        id_bytes_.resize(vocab);
        for (int id = 0; id < vocab; ++id) {
            if (processor_.IsByte(id)) continue;  // filled from byte_ids_ below
            // The unknown token (never produced, thanks to byte fallback) decodes to nothing.
            if (processor_.IsUnknown(id) || processor_.IsControl(id) || processor_.IsUnused(id)) continue;
            std::string_view piece = processor_.IdToPiece(id);
            words_independent_ = words_independent_ && piece.find(kSpaceMark, 1) == std::string_view::npos;
            for (size_t at = piece.find(kSpaceMark); at != std::string_view::npos; at = piece.find(kSpaceMark)) {
                id_bytes_[id].append(piece.substr(0, at)).push_back(' ');
                piece.remove_prefix(at + kSpaceMark.size());
            }
            id_bytes_[id].append(piece);
        }
        for (int byte = 0; byte < 256; ++byte) id_bytes_[byte_ids_[byte]] = std::string(1, static_cast<char>(byte));
        // A model from elsewhere, or a crafted one, may normalise text or hold pieces that
        // decode differently from what encoding matched: it must give back a probe text exactly.
        constexpr std::string_view probe = "Fellow  citizens,\n\t1790 caf\xc3\xa9 \xf0\x9f\x99\x82 \xff end. ";
        require(decode(encode(probe)) == (dummy_prefix_ ? " " : "") + std::string(probe),
                "bpe tokenizer does not give back the text it encodes (normalisation or pieces changed: not made by "
                "dqt): re-create the dataset with `dqt data`");
    }

    std::vector<int32_t> encode(std::string_view text) const override {
        std::vector<int32_t> tokens;
        tokens.reserve(text.size() / 3);
        std::string prefixed;
        if (dummy_prefix_ && !text.empty()) {
            prefixed.reserve(text.size() + 1);
            prefixed.append(" ").append(text);
            text = prefixed;
        }
        WordCache cache;
        while (!text.empty()) {
            const size_t bad = find_invalid_utf8(text);
            encode_valid(text.substr(0, bad), tokens, cache);  // bad == npos: all of it
            if (bad == std::string_view::npos) break;
            tokens.push_back(byte_ids_[static_cast<uint8_t>(text[bad])]);
            text.remove_prefix(bad + 1);
        }
        return tokens;
    }
    std::string decode(std::span<const int32_t> tokens) const override {
        std::string text;
        for (int32_t token : tokens) {
            require_in_vocab(token, vocab_size());
            text += id_bytes_[token];
        }
        return text;
    }
    int vocab_size() const override { return static_cast<int>(id_bytes_.size()); }
    std::string kind() const override { return "bpe"; }
    std::string serialize() const override { return proto_; }

private:
    // Word -> its tokens, for one encode() call (keys point into the caller's text).
    using WordCache = std::unordered_map<std::string_view, std::vector<int32_t>>;

    // text: valid UTF-8. Literal U+2581 goes out as its three byte tokens.
    void encode_valid(std::string_view text, std::vector<int32_t>& tokens, WordCache& cache) const {
        while (!text.empty()) {
            const size_t mark = text.find(kSpaceMark);
            std::string_view plain = text.substr(0, mark);
            while (!plain.empty()) {
                const std::string_view word = words_independent_ ? plain.substr(0, plain.find(' ', 1)) : plain;
                auto [entry, added] = cache.try_emplace(word);
                if (added) {
                    std::vector<int> ids;
                    const auto status = processor_.Encode(word, &ids);
                    if (!status.ok()) throw Error("bpe tokenizer failed to encode text: " + status.ToString());
                    entry->second.assign(ids.begin(), ids.end());
                }
                tokens.insert(tokens.end(), entry->second.begin(), entry->second.end());
                plain.remove_prefix(word.size());
            }
            if (mark == std::string_view::npos) break;
            for (char byte : kSpaceMark) tokens.push_back(byte_ids_[static_cast<uint8_t>(byte)]);
            text.remove_prefix(mark + kSpaceMark.size());
        }
    }

    void load(const std::string& proto) {
        sentencepiece::util::Status status;
        try {
            status = processor_.LoadFromSerializedProto(proto);
        } catch (const std::exception& e) {
            // Its trie builder (darts_clone) throws instead of returning a status, e.g. for a
            // zero-length piece (fuzz/regressions/tokenizer/zero_length_piece.bin).
            status = sentencepiece::util::Status(sentencepiece::util::StatusCode::kInvalidArgument, e.what());
        }
        require(status.ok(), "bpe tokenizer data is not a valid sentencepiece model (" + quote_untrusted(status.ToString(), 120) +
                                 "): re-create the dataset with `dqt data`");
    }

    std::string proto_;                  // as given (serialize() returns it)
    sentencepiece::SentencePieceProcessor processor_;  // proto_, without its dummy prefix
    bool dummy_prefix_ = false;          // encode() puts a space before the text
    bool words_independent_ = true;      // no piece holds a space after its first character
    int32_t byte_ids_[256];              // byte value -> its byte-fallback token
    std::vector<std::string> id_bytes_;  // token -> the bytes it decodes to
};

// sentencepiece's trainer drops sentences longer than max_sentence_length (4192 bytes), and
// a SOTU speech is one line: texts are cut into lines (keeping the newline, so the model learns
// it) and long lines before a space, where a BPE piece cannot span anyway.
constexpr size_t kMaxTrainingChunk = 4000;

// The training chunks of the texts a source gives, one at a time (a corpus larger than memory
// is not copied whole before sentencepiece reads it).
class ChunkIterator final : public sentencepiece::SentenceIterator {
public:
    explicit ChunkIterator(const TextSource& texts) : texts_(texts) { advance(); }
    bool done() const override { return done_; }
    void Next() override { advance(); }
    const std::string& value() const override { return chunk_; }
    sentencepiece::util::Status status() const override { return {}; }

private:
    void advance() {
        while (rest_.empty() && line_.empty()) {
            if (!texts_(text_)) {
                done_ = true;
                return;
            }
            rest_ = text_;
        }
        if (line_.empty()) {
            size_t line_end = rest_.find('\n');
            line_end = line_end == std::string_view::npos ? rest_.size() : line_end + 1;
            line_ = rest_.substr(0, line_end);
            rest_.remove_prefix(line_end);
        }
        size_t cut = line_.size();
        if (line_.size() > kMaxTrainingChunk) {
            cut = line_.rfind(' ', kMaxTrainingChunk);
            if (cut == std::string_view::npos || cut == 0) {
                cut = kMaxTrainingChunk;
                // Not inside a character: back up over UTF-8 continuation bytes.
                while (cut > 0 && (static_cast<uint8_t>(line_[cut]) & 0xC0) == 0x80) --cut;
            }
        }
        chunk_.assign(line_.substr(0, cut));
        line_.remove_prefix(cut);
    }

    const TextSource& texts_;
    std::string text_;        // the text being cut
    std::string_view rest_;   // its lines not yet taken
    std::string_view line_;   // the rest of the line being cut
    std::string chunk_;
    bool done_ = false;
};

// tokenizer.bin: layout in tokenizer.h.
constexpr char kTokenizerMagic[8] = {'D', 'Q', 'T', 'T', 'O', 'K', 'E', 'N'};
constexpr uint32_t kTokenizerVersion = 1;

template <typename T>
std::string_view as_bytes(const T& value) {
    return {reinterpret_cast<const char*>(&value), sizeof value};
}

template <typename T>
T from_bytes(std::string_view bytes) {
    T value;
    std::memcpy(&value, bytes.data(), sizeof value);
    return value;
}

}  // namespace

std::unique_ptr<Tokenizer> make_byte_tokenizer() { return std::make_unique<ByteTokenizer>(); }

std::unique_ptr<Tokenizer> train_bpe_tokenizer(const std::vector<std::string>& texts, int vocab_size, int threads) {
    size_t next = 0;
    return train_bpe_tokenizer(
        [&](std::string& text) {
            if (next == texts.size()) return false;
            text = texts[next++];
            return true;
        },
        vocab_size, threads);
}

std::unique_ptr<Tokenizer> train_bpe_tokenizer(const TextSource& texts, int vocab_size, int threads) {
    require(vocab_size > 257 && vocab_size <= (1 << 20),
            "BPE vocabulary size " + std::to_string(vocab_size) +
                " is out of range: choose one in [258, 1048576] (e.g. 4096)");
    ChunkIterator iterator(texts);
    require(!iterator.done(), "cannot train a BPE tokenizer on an empty corpus: add some text");
    const std::unordered_map<std::string, std::string> options = {
        {"model_type", "bpe"},
        {"vocab_size", std::to_string(vocab_size)},
        {"byte_fallback", "true"},
        // No normalisation of any kind: what is encoded is exactly what decodes.
        {"normalization_rule_name", "identity"},
        {"add_dummy_prefix", "false"},
        {"remove_extra_whitespaces", "false"},
        {"split_digits", "true"},
        {"max_sentence_length", std::to_string(kMaxTrainingChunk + 1)},
        // Only the unknown token (never produced, thanks to byte fallback): documents are
        // separated by text, not by bos/eos tokens.
        {"bos_id", "-1"},
        {"eos_id", "-1"},
        {"num_threads", std::to_string(std::max(1, threads))},
        {"minloglevel", "2"},  // silence sentencepiece's progress log
    };
    std::string proto;
    const auto status = sentencepiece::SentencePieceTrainer::Train(options, &iterator, &proto);
    if (!status.ok()) {
        // Keep sentencepiece's reason, not its "file(line) [check]" prefix.
        std::string reason = status.message();
        const size_t end_of_check = reason.rfind("] ");
        if (end_of_check != std::string::npos) reason.erase(0, end_of_check + 2);
        throw Error("cannot train a BPE tokenizer with vocabulary " + std::to_string(vocab_size) + ": " + reason +
                    " (choose a vocabulary size that fits the corpus)");
    }
    return std::make_unique<BpeTokenizer>(std::move(proto));
}

bool same_tokenizer(const Tokenizer& a, const Tokenizer& b) {
    return a.kind() == b.kind() && a.serialize() == b.serialize();
}

std::unique_ptr<Tokenizer> load_tokenizer(const std::string& kind, const std::string& serialized) {
    if (kind == "byte") return make_byte_tokenizer();
    if (kind == "bpe") return std::make_unique<BpeTokenizer>(serialized);
    if (kind == "byte-level-bpe") return load_byte_level_bpe(serialized, "the stored tokenizer.json");
    throw Error("unknown tokenizer kind " + quote_untrusted(kind) +
                " (expected byte, bpe or byte-level-bpe): the file was not written by this dqt");
}

void save_tokenizer_file(const std::string& path, const Tokenizer& tokenizer) {
    const std::string kind = tokenizer.kind();
    const std::string blob = tokenizer.serialize();
    const auto kind_length = static_cast<uint32_t>(kind.size());
    const auto blob_length = static_cast<uint64_t>(blob.size());
    AtomicFileWriter file(path);
    uint32_t crc = 0;
    for (std::string_view piece :
         {std::string_view(kTokenizerMagic, 8), as_bytes(kTokenizerVersion), as_bytes(kind_length),
          std::string_view(kind), as_bytes(blob_length), std::string_view(blob)}) {
        file.write(piece.data(), piece.size());
        crc = crc32_update(crc, piece.data(), piece.size());
    }
    file.write(&crc, sizeof crc);
    file.commit();
}

std::unique_ptr<Tokenizer> load_tokenizer_file(const std::string& path) {
    std::error_code ec;
    require(std::filesystem::exists(path, ec), "tokenizer file " + path + " not found: run `dqt data` to create it");
    const std::string bytes = read_file(path, "tokenizer file");
    const std::string fix = ": re-create the dataset with `dqt data`";
    // Reads the next n bytes, failing cleanly when the file ends first.
    size_t at = 0;
    auto take = [&](size_t n) {
        require(bytes.size() - at >= n, "tokenizer file " + path + ": truncated" + fix);
        const std::string_view piece(bytes.data() + at, n);
        at += n;
        return piece;
    };
    auto take_u32 = [&] { return from_bytes<uint32_t>(take(4)); };
    auto take_u64 = [&] { return from_bytes<uint64_t>(take(8)); };
    require(take(8) == std::string_view(kTokenizerMagic, 8),
            "tokenizer file " + path + ": wrong magic (not a dqt tokenizer file)" + fix);
    const uint32_t version = take_u32();
    require(version == kTokenizerVersion, "tokenizer file " + path + ": format version " + std::to_string(version) +
                                              " is not supported (expected " + std::to_string(kTokenizerVersion) + ")" +
                                              fix);
    const std::string kind(take(take_u32()));
    const std::string blob(take(take_u64()));
    const uint32_t crc = crc32_update(0, bytes.data(), at);
    require(take_u32() == crc, "tokenizer file " + path + ": checksum mismatch (file corrupt)" + fix);
    require(at == bytes.size(), "tokenizer file " + path + ": unexpected bytes after the end" + fix);
    return load_tokenizer(kind, blob);
}

}  // namespace dqt
