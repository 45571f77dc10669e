#pragma once
// Picking the next token from logits: greedy, temperature, top-k and top-p.
#include <cstdint>

namespace dqt {

struct SamplingOptions {
    float temperature = 0.8f;  // 0 = greedy
    int top_k = 40;            // 0 = no limit
    float top_p = 0.95f;       // 1 = no nucleus cut
    uint64_t seed = 1;
    // dqt::Error naming the flag for a temperature that is negative or not finite, a negative
    // top_k, or a top_p outside (0, 1].
    void validate() const;
};

// Picks a token from logits (V); u in [0, 1) is the one random draw it uses.
int32_t sample_token(const float* logits, int vocab, const SamplingOptions& options, float u);

}  // namespace dqt
