#include "data/byte_level_bpe_parts.h"

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace dqt {

const char* const kLlama3PreTokenizerRegex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

namespace {

using nlohmann::json;

json byte_level_step(bool use_regex) {
    return {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", use_regex}};
}

}  // namespace

// The tokenizer accepted this text when it was made: only its shape is read here.
ByteLevelBpeParts byte_level_bpe_parts(const Tokenizer& tokenizer) {
    require(tokenizer.kind() == "byte-level-bpe", "byte_level_bpe_parts: not a byte-level BPE tokenizer");
    const json j = json::parse(tokenizer.serialize());
    ByteLevelBpeParts parts;
    parts.tokens.resize(static_cast<size_t>(tokenizer.vocab_size()));
    const json& model = j.at("model");
    for (const auto& [text, id] : model.at("vocab").items()) parts.tokens.at(id.get<size_t>()).text = text;
    if (j.contains("added_tokens") && j.at("added_tokens").is_array()) {
        for (const json& added : j.at("added_tokens")) {
            ByteLevelBpeParts::Token& token = parts.tokens.at(added.at("id").get<size_t>());
            token = {added.at("content").get<std::string>(), true, added.value("special", false)};
        }
    }
    for (const json& merge : model.at("merges"))
        parts.merges.push_back(merge.is_string() ? merge.get<std::string>()
                                                 : merge[0].get<std::string>() + " " + merge[1].get<std::string>());
    parts.ignore_merges = model.contains("ignore_merges") && model.at("ignore_merges").is_boolean() &&
                          model.at("ignore_merges").get<bool>();
    const json& pre = j.at("pre_tokenizer");
    if (pre.at("type") == "ByteLevel") {
        const bool use_regex = !pre.contains("use_regex") || pre.at("use_regex").is_null() || pre.at("use_regex").get<bool>();
        parts.pre = use_regex ? ByteLevelBpeParts::PreTokenizer::gpt2 : ByteLevelBpeParts::PreTokenizer::whole_text;
    } else {
        parts.pre = ByteLevelBpeParts::PreTokenizer::split;
        parts.split_regex = pre.at("pretokenizers")[0].at("pattern").at("Regex").get<std::string>();
    }
    return parts;
}

std::string byte_level_bpe_json(const ByteLevelBpeParts& parts) {
    json vocab = json::object(), added = json::array();
    for (size_t id = 0; id < parts.tokens.size(); ++id) {
        const ByteLevelBpeParts::Token& token = parts.tokens[id];
        if (token.added) {
            added.push_back({{"id", id}, {"content", token.text}, {"single_word", false}, {"lstrip", false},
                             {"rstrip", false}, {"normalized", false}, {"special", token.special}});
        } else {
            vocab[token.text] = id;
        }
    }
    json pre;
    switch (parts.pre) {
        case ByteLevelBpeParts::PreTokenizer::whole_text: pre = byte_level_step(false); break;
        case ByteLevelBpeParts::PreTokenizer::gpt2: pre = byte_level_step(true); break;
        case ByteLevelBpeParts::PreTokenizer::split:
            pre = {{"type", "Sequence"},
                   {"pretokenizers",
                    {{{"type", "Split"}, {"pattern", {{"Regex", parts.split_regex}}}, {"behavior", "Isolated"}, {"invert", false}},
                     byte_level_step(false)}}};
            break;
    }
    const json j = {{"version", "1.0"},
                    {"added_tokens", added},
                    {"normalizer", nullptr},
                    {"pre_tokenizer", pre},
                    {"decoder", byte_level_step(true)},
                    {"model", {{"type", "BPE"}, {"ignore_merges", parts.ignore_merges}, {"vocab", vocab},
                               {"merges", parts.merges}}}};
    return j.dump();
}

}  // namespace dqt
