#pragma once
// A byte-level BPE tokenizer (data/byte_level_bpe.h) as the lists other formats keep it in:
// tokens by id, merges by rank, the pre-tokenizer. GGUF's "gpt2" tokenizer keys hold these
// (export/gguf_model.h writes them, export/llamacpp_gguf.h reads them); to and from the
// tokenizer.json text the tokenizer is.
#include <string>
#include <vector>

#include "data/tokenizer.h"

namespace dqt {

// LLaMA 3's pre-tokenizer regex as its tokenizer.json writes it (llama.cpp's "llama-bpe").
extern const char* const kLlama3PreTokenizerRegex;

struct ByteLevelBpeParts {
    struct Token {
        std::string text;      // the vocabulary's byte symbols (data/byte_symbols.h); an added token's own text
        bool added = false;    // found in the text before BPE, and its own id
        bool special = false;  // an added token marked special (llama.cpp: a control token)
    };
    enum class PreTokenizer {
        whole_text,  // ByteLevel without its regex: the text is one pre-token
        gpt2,        // ByteLevel with GPT-2's regex
        split,       // a Split regex (split_regex), then ByteLevel without its own
    };
    std::vector<Token> tokens;        // by id
    std::vector<std::string> merges;  // "left right", by rank
    PreTokenizer pre = PreTokenizer::whole_text;
    std::string split_regex;
    bool ignore_merges = false;  // a pre-token that is itself a token is that token
};

// tokenizer: kind() "byte-level-bpe".
ByteLevelBpeParts byte_level_bpe_parts(const Tokenizer& tokenizer);
// A tokenizer.json that load_byte_level_bpe reads as these parts.
std::string byte_level_bpe_json(const ByteLevelBpeParts& parts);

}  // namespace dqt
