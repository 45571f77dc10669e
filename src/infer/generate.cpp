#include "infer/generate.h"

#include <algorithm>
#include <chrono>
#include <vector>

#include "core/error.h"
#include "core/rng.h"

namespace dqt {

GenerationResult generate_text(const InferenceModel& model, const Tokenizer& tokenizer, const std::string& prompt,
                               int max_new_tokens, const SamplingOptions& sampling, KvCacheType cache_type,
                               const std::function<void(const std::string&)>& on_text) {
    require(max_new_tokens >= 0, "--tokens must not be negative");
    sampling.validate();
    std::vector<int32_t> tokens = tokenizer.encode(prompt);
    require(!tokens.empty(), "the prompt is empty: give at least one character with --prompt");
    const int context = model.config.seq_len;
    if (static_cast<int>(tokens.size()) >= context)
        throw Error("the prompt is " + std::to_string(tokens.size()) + " tokens, but the model's context holds " +
                    std::to_string(context) + " with room for one new token: shorten --prompt");
    const int budget = std::min(max_new_tokens, context - static_cast<int>(tokens.size()));

    // The cache holds what this generation can reach, not the whole context the file claims.
    InferenceSession session(model, static_cast<int>(tokens.size()) + budget, cache_type);
    const float* logits = session.run(tokens.data(), static_cast<int>(tokens.size()), LogitRows::last);
    if (on_text) on_text(prompt);  // only now: a refused prompt prints nothing

    GenerationResult result;
    result.prompt_tokens = static_cast<int>(tokens.size());
    std::vector<int32_t> generated;
    size_t emitted_chars = 0;
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < budget; ++i) {
        const float u = uniform01(sampling.seed, kStreamSample, static_cast<uint32_t>(session.position()), 0);
        const int32_t next = sample_token(logits, model.config.vocab_size, sampling, u);
        generated.push_back(next);
        if (on_text) {
            // Decode the whole continuation and emit what is new; a byte-level tokenizer may
            // hold half a UTF-8 character, which then appears with the next token.
            const std::string text = tokenizer.decode(generated);
            if (text.size() > emitted_chars) {
                on_text(text.substr(emitted_chars));
                emitted_chars = text.size();
            }
        }
        if (i + 1 < budget) logits = session.run(&next, 1, LogitRows::last);
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    result.text = tokenizer.decode(generated);
    result.generated_tokens = static_cast<int>(generated.size());
    result.tokens_per_second = seconds > 0 ? result.generated_tokens / seconds : 0.0;
    return result;
}

}  // namespace dqt
