#pragma once
// A sampled token's log-probability under the model's next-token distribution, log
// softmax(logits), and its most likely alternatives': what `dqt serve` answers OpenAI's
// logprobs options with. The distribution is the model's own, before temperature, top-k and
// top-p reshape it for sampling (vLLM's default), so the numbers do not depend on how the
// token was drawn.
#include <cstdint>
#include <vector>

namespace dqt {

struct TokenLogprob {
    int32_t token = 0;
    float logprob = 0.0f;
};

struct SampledLogprobs {
    TokenLogprob sampled;
    std::vector<TokenLogprob> top;  // the most likely tokens, most likely first (ties: the lower id)
};

// Of logits (vocab): the sampled token's log-probability and the `top` most likely tokens'
// (at most vocab). The normaliser is summed in double, so a log-probability is exact to fp32.
SampledLogprobs sampled_logprobs(const float* logits, int vocab, int32_t sampled, int top);

}  // namespace dqt
