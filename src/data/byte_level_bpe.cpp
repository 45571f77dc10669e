#include "data/byte_level_bpe.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <climits>
#include <limits>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "data/byte_symbols.h"

namespace dqt {

namespace {

using nlohmann::json;

// GPT-2's pre-tokenizer, which ByteLevel applies when its use_regex is true.
constexpr const char* kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// A compiled PCRE2 pattern (UTF, Unicode properties, invalid UTF-8 tolerated: it never
// matches there).
class Regex {
public:
    Regex(const std::string& pattern, const std::string& where) {
        int error = 0;
        PCRE2_SIZE offset = 0;
        code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                              PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &error, &offset, nullptr);
        if (code_ == nullptr) {
            PCRE2_UCHAR message[200];
            pcre2_get_error_message(error, message, sizeof message);
            throw Error(where + ": the pre-tokenizer's regex does not compile at offset " + std::to_string(offset) +
                        " (" + reinterpret_cast<const char*>(message) + ")");
        }
        pcre2_jit_compile(code_, PCRE2_JIT_COMPLETE);  // falls back to the interpreter when JIT is unavailable
    }
    ~Regex() { pcre2_code_free(code_); }
    Regex(const Regex&) = delete;
    Regex& operator=(const Regex&) = delete;

    // Calls piece(begin, end) for the consecutive pieces of text: each match, and each run of
    // bytes between matches.
    template <typename Piece>
    void split(std::string_view text, Piece&& piece) const {
        pcre2_match_data* match = pcre2_match_data_create_from_pattern(code_, nullptr);
        size_t at = 0, covered = 0;
        while (at < text.size()) {
            const int found = pcre2_match(code_, reinterpret_cast<PCRE2_SPTR>(text.data()), text.size(), at, 0, match,
                                          nullptr);
            if (found < 0) break;  // PCRE2_ERROR_NOMATCH: the rest is uncovered
            const PCRE2_SIZE* range = pcre2_get_ovector_pointer(match);
            if (range[0] > covered) piece(covered, range[0]);
            if (range[1] > range[0]) piece(range[0], range[1]);
            covered = range[1];
            at = range[1] > range[0] ? range[1] : range[0] + 1;  // an empty match moves on a byte
        }
        pcre2_match_data_free(match);
        if (covered < text.size()) piece(covered, text.size());
    }

private:
    pcre2_code* code_ = nullptr;
};

// The byte whose GPT-2 symbol is code point `symbol`, or -1.
int byte_of_symbol(uint32_t symbol) {
    static const std::unordered_map<uint32_t, int> bytes = [] {
        std::unordered_map<uint32_t, int> map;
        for (int b = 0; b < 256; ++b) {
            const std::string& s = gpt2_byte_symbol(b);
            const uint32_t code =
                s.size() == 1 ? static_cast<uint8_t>(s[0]) : ((static_cast<uint8_t>(s[0]) & 0x1f) << 6) | (static_cast<uint8_t>(s[1]) & 0x3f);
            map[code] = b;
        }
        return map;
    }();
    const auto found = bytes.find(symbol);
    return found == bytes.end() ? -1 : found->second;
}

// The bytes a vocabulary token stands for (its symbols mapped back); false when some character
// is not a byte symbol.
bool token_bytes(const std::string& token, std::string& out) {
    out.clear();
    for (size_t i = 0; i < token.size();) {
        const auto lead = static_cast<uint8_t>(token[i]);
        uint32_t code = 0;
        size_t length = 1;
        if (lead < 0x80) {
            code = lead;
        } else if ((lead & 0xe0) == 0xc0 && i + 1 < token.size()) {
            code = ((lead & 0x1f) << 6) | (static_cast<uint8_t>(token[i + 1]) & 0x3f);
            length = 2;
        } else {
            return false;  // byte symbols are at most U+0143: one or two UTF-8 bytes
        }
        const int byte = byte_of_symbol(code);
        if (byte < 0) return false;
        out.push_back(static_cast<char>(byte));
        i += length;
    }
    return !out.empty();
}

// object[key] as a bool, `fallback` when absent or null; dqt::Error when it is not a bool.
bool flag(const json& object, const char* key, bool fallback, const std::string& where) {
    if (!object.contains(key) || object.at(key).is_null()) return fallback;
    require(object.at(key).is_boolean(), where + ": " + key + " must be true or false");
    return object.at(key).get<bool>();
}

uint64_t pair_key(int32_t left, int32_t right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
}

class ByteLevelBpe final : public Tokenizer {
public:
    ByteLevelBpe(std::string text, const std::string& source) : text_(std::move(text)) {
        const std::string where = source;
        const json j = json::parse(text_, nullptr, false);
        require(!j.is_discarded() && j.is_object(), where + " is not a JSON object");
        if (j.contains("normalizer") && !j.at("normalizer").is_null()) {
            throw Error(where + ": a normalizer (" + quote_untrusted(j.at("normalizer").dump(), 60) +
                        ") is not supported: dqt reads byte-level BPE without one (LLaMA 3's, GPT-2's)");
        }
        read_model(j, where);
        read_added_tokens(j, where);
        assign_ids(where);
        read_pre_tokenizer(j, where);
        for (int b = 0; b < 256; ++b) {
            const auto found = vocab_.find(gpt2_byte_symbol(b));
            require(found != vocab_.end(), where + ": the vocabulary lacks the byte symbol of byte " + std::to_string(b));
            byte_ids_[b] = found->second;
        }
    }

    std::vector<int32_t> encode(std::string_view text) const override {
        std::vector<int32_t> ids;
        // Each added token's next occurrence at or after `at` (found again only once passed),
        // so the text is scanned once per added token, however many of them it holds.
        std::vector<size_t> next_at(added_.size(), 0);
        std::vector<bool> searched(added_.size(), false);
        size_t at = 0;
        while (at < text.size()) {
            // The earliest added token in the rest of the text (the longest where several start there).
            size_t next = text.size();
            const AddedToken* hit = nullptr;
            for (size_t k = 0; k < added_.size(); ++k) {
                if (!searched[k] || (next_at[k] != std::string_view::npos && next_at[k] < at)) {
                    next_at[k] = text.find(added_[k].content, at);
                    searched[k] = true;
                }
                const size_t found = next_at[k];
                if (found == std::string_view::npos) continue;
                if (found < next || (found == next && added_[k].content.size() > hit->content.size())) {
                    next = found;
                    hit = &added_[k];
                }
            }
            encode_ordinary(text.substr(at, next - at), ids);
            if (hit == nullptr) break;
            ids.push_back(hit->id);
            at = next + hit->content.size();
        }
        return ids;
    }

    std::string decode(std::span<const int32_t> tokens) const override {
        std::string text;
        for (const int32_t id : tokens) {
            if (id < 0 || static_cast<size_t>(id) >= id_bytes_.size()) {
                throw Error("token id " + std::to_string(id) + " is outside the tokenizer's vocabulary of " +
                            std::to_string(id_bytes_.size()) + ": tokens and tokenizer do not match");
            }
            text += id_bytes_[static_cast<size_t>(id)];
        }
        return text;
    }

    int vocab_size() const override { return static_cast<int>(id_bytes_.size()); }
    std::string kind() const override { return "byte-level-bpe"; }
    std::string serialize() const override { return text_; }

private:
    struct AddedToken {
        std::string content;
        int32_t id;
    };
    struct Merge {
        int32_t rank;
        int32_t merged;
    };

    // Every id 0 .. N-1 stands for exactly one token, N the entries read (so what is allocated
    // is bounded by the file).
    void assign_ids(const std::string& where) {
        const size_t size = entries_.size();
        id_bytes_.resize(size);
        std::vector<bool> taken(size, false);
        for (auto& [id, bytes] : entries_) {
            require(id >= 0 && static_cast<uint64_t>(id) < size,
                    where + ": token id " + std::to_string(id) + " leaves ids without a token (" + std::to_string(size) +
                        " tokens need ids 0 to " + std::to_string(size - 1) + ")");
            require(!taken[static_cast<size_t>(id)], where + ": token id " + std::to_string(id) + " is given twice");
            taken[static_cast<size_t>(id)] = true;
            id_bytes_[static_cast<size_t>(id)] = std::move(bytes);
        }
        entries_.clear();
    }

    void read_model(const json& j, const std::string& where) {
        require(j.contains("model") && j.at("model").is_object(), where + " has no \"model\" object");
        const json& model = j.at("model");
        const json type = model.value("type", json());
        require(type == "BPE", where + ": model type " + quote_untrusted(type.dump(), 40) +
                                   " is not supported: dqt reads byte-level BPE tokenizer.json files");
        for (const char* key : {"dropout", "continuing_subword_prefix", "end_of_word_suffix", "unk_token"}) {
            require(!model.contains(key) || model.at(key).is_null(),
                    where + ": model." + key + " is set, which dqt's byte-level BPE does not support");
        }
        require(!flag(model, "byte_fallback", false, where + ": model"),
                where + ": model.byte_fallback is not supported (byte-level BPE needs none)");
        ignore_merges_ = flag(model, "ignore_merges", false, where + ": model");
        require(model.contains("vocab") && model.at("vocab").is_object(), where + ": model.vocab is not an object");
        std::string bytes;
        for (const auto& [token, id] : model.at("vocab").items()) {
            require(id.is_number_integer(), where + ": the id of vocabulary token " + quote_untrusted(token, 40) +
                                                " is not a whole number");
            require(token_bytes(token, bytes), where + ": vocabulary token " + quote_untrusted(token, 40) +
                                                   " is not made of byte symbols (not a byte-level vocabulary)");
            const int64_t value = id.is_number_unsigned() && id.get<uint64_t>() > INT32_MAX ? -1 : id.get<int64_t>();
            require(value >= 0 && value <= INT32_MAX, where + ": vocabulary token " + quote_untrusted(token, 40) +
                                                          " has id " + id.dump() + ", not in [0, 2^31)");
            entries_.emplace_back(value, bytes);
            vocab_.emplace(token, static_cast<int32_t>(value));
        }
        require(model.contains("merges") && model.at("merges").is_array(), where + ": model.merges is not a list");
        int32_t rank = 0;
        for (const json& merge : model.at("merges")) {
            std::string left, right;
            if (merge.is_string()) {  // "left right"
                const std::string pair = merge.get<std::string>();
                const size_t space = pair.find(' ');
                require(space != std::string::npos && pair.find(' ', space + 1) == std::string::npos,
                        where + ": merge " + quote_untrusted(pair, 40) + " is not two tokens separated by a space");
                left = pair.substr(0, space);
                right = pair.substr(space + 1);
            } else {  // ["left", "right"]
                require(merge.is_array() && merge.size() == 2 && merge[0].is_string() && merge[1].is_string(),
                        where + ": a merge is neither \"left right\" nor a pair of strings");
                left = merge[0].get<std::string>();
                right = merge[1].get<std::string>();
            }
            const auto l = vocab_.find(left), r = vocab_.find(right), m = vocab_.find(left + right);
            require(l != vocab_.end() && r != vocab_.end() && m != vocab_.end(),
                    where + ": merge " + quote_untrusted(left + " " + right, 40) + " names a token not in the vocabulary");
            merges_.emplace(pair_key(l->second, r->second), Merge{rank++, m->second});  // the first listing wins
        }
    }

    void read_added_tokens(const json& j, const std::string& where) {
        if (!j.contains("added_tokens") || j.at("added_tokens").is_null()) return;
        require(j.at("added_tokens").is_array(), where + ": added_tokens is not a list");
        for (const json& added : j.at("added_tokens")) {
            require(added.is_object() && added.contains("id") && added.at("id").is_number_integer() &&
                        added.contains("content") && added.at("content").is_string() &&
                        !added.at("content").get<std::string>().empty(),
                    where + ": an added token lacks a whole-number id or a non-empty content");
            const std::string content = added.at("content").get<std::string>();
            for (const char* option : {"lstrip", "rstrip", "single_word"}) {
                require(!flag(added, option, false, where + ": added token " + quote_untrusted(content, 40)),
                        where + ": added token " + quote_untrusted(content, 40) + " sets " + option +
                            ", which dqt does not support");
            }
            const json& id_value = added.at("id");
            const int64_t id = id_value.is_number_unsigned() && id_value.get<uint64_t>() > INT32_MAX ? -1 : id_value.get<int64_t>();
            require(id >= 0 && id <= INT32_MAX, where + ": added token " + quote_untrusted(content, 40) + " has id " +
                                                    id_value.dump() + ", not in [0, 2^31)");
            const auto in_vocab = vocab_.find(content);
            if (in_vocab != vocab_.end() && in_vocab->second == id) {
                added_.push_back({content, static_cast<int32_t>(id)});  // already assigned by the vocabulary
                continue;
            }
            entries_.emplace_back(id, content);
            added_.push_back({content, static_cast<int32_t>(id)});
        }
    }

    void read_pre_tokenizer(const json& j, const std::string& where) {
        const json none;
        const json& pre = j.contains("pre_tokenizer") ? j.at("pre_tokenizer") : none;
        const std::string unsupported =
            where + ": pre_tokenizer " + quote_untrusted(pre.dump(), 80) +
            " is not supported: dqt reads ByteLevel (GPT-2's regex) or a Split regex followed by ByteLevel (LLaMA 3's)";
        auto byte_level = [&](const json& step) {
            require(step.is_object() && step.value("type", json()) == "ByteLevel", unsupported);
            require(!flag(step, "add_prefix_space", false, where + ": ByteLevel"),
                    where + ": ByteLevel's add_prefix_space is not supported (dqt adds nothing to the text)");
            return flag(step, "use_regex", true, where + ": ByteLevel");
        };
        if (pre.is_object() && pre.value("type", json()) == "ByteLevel") {
            // Without its regex, ByteLevel keeps the whole text as one pre-token (no regex_).
            if (byte_level(pre)) regex_ = std::make_unique<Regex>(kGpt2Pattern, where);
            return;
        }
        require(pre.is_object() && pre.value("type", json()) == "Sequence" && pre.contains("pretokenizers") &&
                    pre.at("pretokenizers").is_array() && pre.at("pretokenizers").size() == 2,
                unsupported);
        const json& split = pre.at("pretokenizers")[0];
        require(split.is_object() && split.value("type", json()) == "Split" && split.value("behavior", json()) == "Isolated" &&
                    !flag(split, "invert", false, where + ": Split") && split.contains("pattern") && split.at("pattern").is_object() &&
                    split.at("pattern").contains("Regex") && split.at("pattern").at("Regex").is_string(),
                unsupported);
        require(!byte_level(pre.at("pretokenizers")[1]), unsupported);
        regex_ = std::make_unique<Regex>(split.at("pattern").at("Regex").get<std::string>(), where);
    }

    // Text without added tokens: pre-tokens, then BPE over each one's byte symbols.
    void encode_ordinary(std::string_view text, std::vector<int32_t>& ids) const {
        std::string symbols;
        std::vector<int32_t> word;
        const auto encode_piece = [&](size_t begin, size_t end) {
            word.clear();
            for (size_t i = begin; i < end; ++i) word.push_back(byte_ids_[static_cast<uint8_t>(text[i])]);
            if (ignore_merges_ && word.size() > 1) {
                symbols.clear();
                for (size_t i = begin; i < end; ++i) symbols += gpt2_byte_symbol(static_cast<uint8_t>(text[i]));
                const auto whole = vocab_.find(symbols);
                if (whole != vocab_.end()) {
                    ids.push_back(whole->second);
                    return;
                }
            }
            merge(word);
            ids.insert(ids.end(), word.begin(), word.end());
        };
        if (regex_) {
            regex_->split(text, encode_piece);
        } else if (!text.empty()) {
            encode_piece(0, text.size());
        }
    }

    // Applies the merges to word, lowest rank first; each pass merges every occurrence of the
    // best pair, left to right.
    void merge(std::vector<int32_t>& word) const {
        while (word.size() > 1) {
            int32_t best_rank = std::numeric_limits<int32_t>::max(), merged = -1;
            uint64_t best_pair = 0;
            for (size_t i = 0; i + 1 < word.size(); ++i) {
                const auto found = merges_.find(pair_key(word[i], word[i + 1]));
                if (found != merges_.end() && found->second.rank < best_rank) {
                    best_rank = found->second.rank;
                    merged = found->second.merged;
                    best_pair = found->first;
                }
            }
            if (merged < 0) return;
            size_t out = 0;
            for (size_t i = 0; i < word.size(); ++out) {
                if (i + 1 < word.size() && pair_key(word[i], word[i + 1]) == best_pair) {
                    word[out] = merged;
                    i += 2;
                } else {
                    word[out] = word[i++];
                }
            }
            word.resize(out);
        }
    }

    std::string text_;
    std::unordered_map<std::string, int32_t> vocab_;  // token (byte symbols) -> id
    std::unordered_map<uint64_t, Merge> merges_;       // (left id, right id) -> rank, merged id
    std::vector<AddedToken> added_;
    std::vector<std::pair<int64_t, std::string>> entries_;  // (id, bytes) as read, until assign_ids
    std::vector<std::string> id_bytes_;                 // id -> the bytes it decodes to
    int32_t byte_ids_[256] = {};
    bool ignore_merges_ = false;
    std::unique_ptr<Regex> regex_;
};

}  // namespace

std::unique_ptr<Tokenizer> load_byte_level_bpe(const std::string& tokenizer_json, const std::string& source) {
    return std::make_unique<ByteLevelBpe>(tokenizer_json, source);
}

}  // namespace dqt
