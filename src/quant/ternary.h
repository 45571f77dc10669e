#pragma once
// BitNet b1.58's weight quantizer: gamma = mean|W| over the tensor,
// Wq = clip(round(W / (gamma + eps)), -1, 1) * gamma, eps = 1e-5.

#include <cstddef>
#include <cstdint>

namespace dqt {

inline constexpr float kTernaryEps = 1e-5f;

// mean |w| summed in double over fixed chunks: the same bits for any thread count.
double mean_abs(const float* w, size_t count);

// out = Wq of w (both (count)); returns gamma.
float absmean_ternarize(float* out, const float* w, size_t count);

// out = clip(round(w / (gamma + eps)), -1, 1) * gamma for part of a tensor whose gamma is known.
void ternarize_with_gamma(float* out, const float* w, size_t count, float gamma);

// q = clip(round(w / (gamma + eps)), -1, 1): the integer codes of the same projection.
void ternary_codes_with_gamma(int8_t* q, const float* w, size_t count, float gamma);

}  // namespace dqt
