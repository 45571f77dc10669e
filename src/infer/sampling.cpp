#include "infer/sampling.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include "core/error.h"

namespace dqt {

void SamplingOptions::validate() const {
    require(std::isfinite(temperature) && temperature >= 0.0f,
            "--temperature must be a finite number >= 0 (0 = greedy), got " + format_number(temperature));
    require(top_k >= 0, "--top-k must not be negative (0 = all tokens), got " + std::to_string(top_k));
    require(std::isfinite(top_p) && top_p > 0.0f && top_p <= 1.0f,
            "--top-p must be in (0, 1] (1 = no nucleus cut), got " + format_number(top_p));
}

int32_t sample_token(const float* logits, int vocab, const SamplingOptions& options, float u) {
    if (options.temperature <= 0.0f) {
        return static_cast<int32_t>(std::max_element(logits, logits + vocab) - logits);
    }
    // Candidates by descending logit (ties by id, so the choice is deterministic).
    std::vector<int32_t> order(vocab);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
    int keep = vocab;
    if (options.top_k > 0) keep = std::min(keep, options.top_k);

    std::vector<double> probs(keep);
    const double top = logits[order[0]];
    double sum = 0.0;
    for (int i = 0; i < keep; ++i) {
        probs[i] = std::exp((logits[order[i]] - top) / options.temperature);
        sum += probs[i];
    }
    if (options.top_p < 1.0f) {
        // Smallest prefix whose probability mass reaches top_p.
        double mass = 0.0;
        int cut = keep;
        for (int i = 0; i < keep; ++i) {
            mass += probs[i] / sum;
            if (mass >= options.top_p) {
                cut = i + 1;
                break;
            }
        }
        keep = cut;
        sum = std::accumulate(probs.begin(), probs.begin() + keep, 0.0);
    }
    double threshold = u * sum;
    for (int i = 0; i < keep; ++i) {
        threshold -= probs[i];
        if (threshold < 0.0) return order[i];
    }
    return order[keep - 1];
}

}  // namespace dqt
