#pragma once
// Text generation: encode a prompt, run it through one inference session, sample new tokens.
#include <functional>
#include <string>
#include <vector>

#include "data/special_tokens.h"
#include "data/tokenizer.h"
#include "infer/generation.h"
#include "infer/inference_model.h"
#include "infer/sampling.h"
#include "infer/session.h"

namespace dqt {

struct GenerationResult {
    std::string text;            // the continuation only (prompt excluded)
    int prompt_tokens = 0;
    int generated_tokens = 0;
    double tokens_per_second = 0.0;  // decode passes per second (the first new token needs none); 0: none ran
    FinishReason finish_reason = FinishReason::length;
};

// on_text (optional) receives the prompt once it has been run, then each new piece of text as
// soon as it is decodable (the result's text is the continuation only). dqt::Error for
// a prompt that leaves no room in the context for a new token; generation stops when the
// context is full, before the first of the `stop` strings, or at one of the model's
// end-of-generation tokens (infer/generation.h); the prompt starts with BOS where the model's
// files ask for it.
GenerationResult generate_text(const InferenceModel& model, const Tokenizer& tokenizer, const SpecialTokens& special,
                               const std::string& prompt, int max_new_tokens, const SamplingOptions& sampling,
                               KvCacheType cache_type, const std::function<void(const std::string&)>& on_text = nullptr,
                               const std::vector<std::string>& stop = {});

}  // namespace dqt
