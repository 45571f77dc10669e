#pragma once
// The special tokens a model's files name (GGUF's tokenizer.ggml.bos/eos/eot/eom_token_id and
// add_bos_token; Hugging Face's config.json, generation_config.json and tokenizer_config.json):
// what a prompt starts with and which sampled tokens end a generation. Models dqt trains have
// none (documents are joined by text, data/dataset.h), and neither dqt's checkpoints nor its
// exports carry them yet.
#include <algorithm>
#include <cstdint>
#include <string_view>
#include <vector>

#include "data/tokenizer.h"

namespace dqt {

struct SpecialTokens {
    int32_t bos = -1;       // the beginning-of-text token; -1: none
    bool add_bos = false;   // put it before every prompt
    std::vector<int32_t> end_of_generation;  // a sampled one ends the generation, its text unshown

    // The prompt's tokens: BOS (when add_bos) and the text's.
    std::vector<int32_t> prompt(const Tokenizer& tokenizer, std::string_view text) const {
        std::vector<int32_t> tokens;
        if (add_bos && bos >= 0 && !text.empty()) tokens.push_back(bos);
        const std::vector<int32_t> encoded = tokenizer.encode(text);
        tokens.insert(tokens.end(), encoded.begin(), encoded.end());
        return tokens;
    }
    bool ends_generation(int32_t token) const {
        return std::find(end_of_generation.begin(), end_of_generation.end(), token) != end_of_generation.end();
    }
};

}  // namespace dqt
