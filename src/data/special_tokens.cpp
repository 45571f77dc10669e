#include "data/special_tokens.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace dqt {

std::vector<int32_t> SpecialTokens::prompt(const Tokenizer& tokenizer, std::string_view text) const {
    std::vector<int32_t> tokens;
    if (add_bos && bos >= 0 && !text.empty()) tokens.push_back(bos);
    const std::vector<int32_t> encoded = tokenizer.encode(text);
    tokens.insert(tokens.end(), encoded.begin(), encoded.end());
    return tokens;
}

bool SpecialTokens::ends_generation(int32_t token) const {
    return std::find(end_of_generation.begin(), end_of_generation.end(), token) != end_of_generation.end();
}

void SpecialTokens::check(int vocab_size, const std::string& where) const {
    auto in_vocabulary = [&](int32_t id) { return id >= 0 && id < vocab_size; };
    require(bos == -1 || in_vocabulary(bos), where + ": the BOS token " + std::to_string(bos) +
                                                 " is outside the vocabulary of " + std::to_string(vocab_size));
    for (int32_t id : end_of_generation)
        require(in_vocabulary(id), where + ": the end-of-generation token " + std::to_string(id) +
                                       " is outside the vocabulary of " + std::to_string(vocab_size));
}

void to_json(nlohmann::json& j, const SpecialTokens& special) {
    j = {{"bos", special.bos}, {"add_bos", special.add_bos}, {"end_of_generation", special.end_of_generation}};
}

void from_json(const nlohmann::json& j, SpecialTokens& special) {
    special.bos = j.at("bos").get<int32_t>();
    special.add_bos = j.at("add_bos").get<bool>();
    special.end_of_generation = j.at("end_of_generation").get<std::vector<int32_t>>();
}

}  // namespace dqt
