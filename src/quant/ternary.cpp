#include "quant/ternary.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace dqt {

double mean_abs(const float* w, size_t count) {
    if (count == 0) return 0.0;
    constexpr size_t kChunk = 1 << 14;
    const size_t chunks = (count + kChunk - 1) / kChunk;
    std::vector<double> partial(chunks, 0.0);
#pragma omp parallel for schedule(static)
    for (size_t chunk = 0; chunk < chunks; ++chunk) {
        double sum = 0.0;
        for (size_t i = chunk * kChunk; i < std::min(count, (chunk + 1) * kChunk); ++i) sum += std::fabs(w[i]);
        partial[chunk] = sum;
    }
    double sum = 0.0;
    for (double value : partial) sum += value;
    return sum / static_cast<double>(count);
}

float absmean_ternarize(float* out, const float* w, size_t count) {
    const float gamma = static_cast<float>(mean_abs(w, count));
    ternarize_with_gamma(out, w, count, gamma);
    return gamma;
}

void ternarize_with_gamma(float* out, const float* w, size_t count, float gamma) {
    const float inv = 1.0f / (gamma + kTernaryEps);
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < count; ++i) out[i] = std::clamp(std::nearbyint(w[i] * inv), -1.0f, 1.0f) * gamma;
}

void ternary_codes_with_gamma(int8_t* q, const float* w, size_t count, float gamma) {
    const float inv = 1.0f / (gamma + kTernaryEps);
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < count; ++i) q[i] = static_cast<int8_t>(std::clamp(std::nearbyint(w[i] * inv), -1.0f, 1.0f));
}

}  // namespace dqt
