#include "infer/logprobs.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/error.h"

namespace dqt {

SampledLogprobs sampled_logprobs(const float* logits, int vocab, int32_t sampled, int top) {
    require(vocab >= 1 && sampled >= 0 && sampled < vocab && top >= 0,
            "sampled_logprobs: a token outside the vocabulary, or a negative count of alternatives");
    const float max_logit = *std::max_element(logits, logits + vocab);
    double sum = 0.0;
    for (int i = 0; i < vocab; ++i) sum += std::exp(static_cast<double>(logits[i]) - max_logit);
    const double log_normaliser = max_logit + std::log(sum);
    const auto logprob = [&](int32_t token) {
        return TokenLogprob{token, static_cast<float>(logits[token] - log_normaliser)};
    };

    SampledLogprobs result;
    result.sampled = logprob(sampled);
    if (top == 0) return result;  // no ranking: most requests ask for the sampled token's alone
    std::vector<int32_t> order(static_cast<size_t>(vocab));
    std::iota(order.begin(), order.end(), 0);
    const int count = std::min(top, vocab);
    std::partial_sort(order.begin(), order.begin() + count, order.end(), [&](int32_t a, int32_t b) {
        return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
    });
    for (int i = 0; i < count; ++i) result.top.push_back(logprob(order[static_cast<size_t>(i)]));
    return result;
}

}  // namespace dqt
