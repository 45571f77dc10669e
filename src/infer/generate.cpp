#include "infer/generate.h"

#include <algorithm>
#include <chrono>
#include <vector>

#include "core/error.h"
#include "infer/generation.h"

namespace dqt {

GenerationResult generate_text(const InferenceModel& model, const Tokenizer& tokenizer, const SpecialTokens& special,
                               const std::string& prompt, int max_new_tokens, const SamplingOptions& sampling,
                               KvCacheType cache_type, const std::function<void(const std::string&)>& on_text,
                               const std::vector<std::string>& stop) {
    require(max_new_tokens >= 0, "--tokens must not be negative");
    sampling.validate();
    std::vector<int32_t> tokens = special.prompt(tokenizer, prompt);
    require(!tokens.empty(), "the prompt is empty: give at least one character with --prompt");
    const int context = model.config.seq_len;
    if (static_cast<int>(tokens.size()) >= context)
        throw Error("the prompt is " + std::to_string(tokens.size()) + " tokens, but the model's context holds " +
                    std::to_string(context) + " with room for one new token: shorten --prompt");
    const int budget = std::min(max_new_tokens, context - static_cast<int>(tokens.size()));

    // The cache holds what this generation can reach, not the whole context the file claims
    // (and one position past the prompt, which a Generation asks for even when --tokens is 0).
    InferenceSession session(model, static_cast<int>(tokens.size()) + std::max(budget, 1), cache_type);
    Generation generation(session, tokenizer, std::move(tokens), max_new_tokens, sampling, stop,
                          special.end_of_generation);
    while (!generation.prompt_ready()) generation.run_prompt_chunk(kPromptChunkTokens);  // untimed
    if (on_text) on_text(prompt);  // only now: a refused prompt prints nothing

    const auto start = std::chrono::steady_clock::now();
    while (!generation.finished()) {
        const std::string piece = generation.step();
        if (on_text && !piece.empty()) on_text(piece);
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    GenerationResult result;
    result.prompt_tokens = generation.prompt_tokens();
    result.text = generation.text();
    result.generated_tokens = generation.generated_tokens();
    result.finish_reason = generation.reason();
    // The first new token is sampled from the prompt's logits; each later one costs a decode
    // pass, and those passes are what the speed counts (none: no speed).
    const int decode_passes = std::max(result.generated_tokens - 1, 0);
    result.tokens_per_second = seconds > 0 ? decode_passes / seconds : 0.0;
    return result;
}

}  // namespace dqt
