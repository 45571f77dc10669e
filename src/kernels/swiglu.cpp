#include "kernels/swiglu.h"

#include <algorithm>
#include <cstdint>

#include "kernels/vecmath.h"

namespace dqt {
namespace {

// Elements per OpenMP work item.
constexpr int64_t kChunk = 4096;

DQT_TARGET_CLONES
void swiglu_forward_range(float* h, const float* gate, const float* up, int64_t n) {
    for (int64_t i = 0; i < n; ++i) h[i] = gate[i] / (1.0f + exp_f32(-gate[i])) * up[i];
}

DQT_TARGET_CLONES
void swiglu_backward_range(float* dgate, float* dup, const float* dh, const float* gate, const float* up, int64_t n) {
    for (int64_t i = 0; i < n; ++i) {
        const float g = gate[i];
        const float sig = 1.0f / (1.0f + exp_f32(-g));
        // d silu(g) / dg = sig * (1 + g * (1 - sig))
        dgate[i] += dh[i] * up[i] * sig * (1.0f + g * (1.0f - sig));
        dup[i] += dh[i] * g * sig;
    }
}

}  // namespace

void swiglu_forward(float* h, const float* gate, const float* up, size_t count) {
    const int64_t n = static_cast<int64_t>(count);
#pragma omp parallel for schedule(static) if (n > kChunk)  // one chunk (decode): no threads to wake
    for (int64_t first = 0; first < n; first += kChunk)
        swiglu_forward_range(h + first, gate + first, up + first, std::min(kChunk, n - first));
}

void swiglu_forward_serial(float* h, const float* gate, const float* up, size_t count) {
    const int64_t n = static_cast<int64_t>(count);
    for (int64_t first = 0; first < n; first += kChunk)
        swiglu_forward_range(h + first, gate + first, up + first, std::min(kChunk, n - first));
}

void swiglu_backward(float* dgate, float* dup, const float* dh, const float* gate, const float* up, size_t count) {
    const int64_t n = static_cast<int64_t>(count);
#pragma omp parallel for schedule(static)
    for (int64_t first = 0; first < n; first += kChunk)
        swiglu_backward_range(dgate + first, dup + first, dh + first, gate + first, up + first,
                              std::min(kChunk, n - first));
}

}  // namespace dqt
