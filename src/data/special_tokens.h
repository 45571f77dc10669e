#pragma once
// The special tokens a model's files name (GGUF's tokenizer.ggml.bos/eos/eot/eom_token_id and
// add_bos_token; Hugging Face's config.json, generation_config.json and tokenizer_config.json):
// what a prompt starts with and which sampled tokens end a generation. Models dqt trains have
// none (documents are joined by text, data/dataset.h); a run started from an imported model
// keeps its model's in the checkpoint, and export writes them out again.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "data/tokenizer.h"

namespace dqt {

struct SpecialTokens {
    int32_t bos = -1;       // the beginning-of-text token; -1: none
    bool add_bos = false;   // put it before every prompt
    std::vector<int32_t> end_of_generation;  // a sampled one ends the generation, its text unshown

    bool empty() const { return bos < 0 && end_of_generation.empty(); }
    // The prompt's tokens: BOS (when add_bos) and the text's.
    std::vector<int32_t> prompt(const Tokenizer& tokenizer, std::string_view text) const;
    bool ends_generation(int32_t token) const;
    // dqt::Error naming `where` when an id is outside the vocabulary.
    void check(int vocab_size, const std::string& where) const;
};

// {"bos": id or -1, "add_bos": bool, "end_of_generation": [ids]}
void to_json(nlohmann::json& j, const SpecialTokens& special);
void from_json(const nlohmann::json& j, SpecialTokens& special);

}  // namespace dqt
