#include "kernels/swiglu.h"

#include <algorithm>
#include <cstdint>

#include "core/error.h"
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

DQT_TARGET_CLONES
void relu2_glu_forward_range(float* h, const float* gate, const float* up, int64_t n) {
    for (int64_t i = 0; i < n; ++i) {
        const float r = max_zero_f32(gate[i]);
        h[i] = r * r * up[i];
    }
}

DQT_TARGET_CLONES
void relu2_glu_backward_range(float* dgate, float* dup, const float* dh, const float* gate, const float* up, int64_t n) {
    for (int64_t i = 0; i < n; ++i) {
        const float r = max_zero_f32(gate[i]);
        dgate[i] += dh[i] * up[i] * 2.0f * r;  // d max(g, 0)^2 / dg = 2 max(g, 0)
        dup[i] += dh[i] * r * r;
    }
}

using ForwardRange = void (*)(float*, const float*, const float*, int64_t);
using BackwardRange = void (*)(float*, float*, const float*, const float*, const float*, int64_t);

void forward_chunks(ForwardRange range, float* h, const float* gate, const float* up, size_t count) {
    const int64_t n = static_cast<int64_t>(count);
#pragma omp parallel for schedule(static) if (n > kChunk)  // one chunk (decode): no threads to wake
    for (int64_t first = 0; first < n; first += kChunk) range(h + first, gate + first, up + first, std::min(kChunk, n - first));
}

// No OpenMP construct at all: inside a team, an inner region (even of one thread) costs a team.
void forward_chunks_serial(ForwardRange range, float* h, const float* gate, const float* up, size_t count) {
    const int64_t n = static_cast<int64_t>(count);
    for (int64_t first = 0; first < n; first += kChunk) range(h + first, gate + first, up + first, std::min(kChunk, n - first));
}

void backward_chunks(BackwardRange range, float* dgate, float* dup, const float* dh, const float* gate,
                     const float* up, size_t count) {
    const int64_t n = static_cast<int64_t>(count);
#pragma omp parallel for schedule(static)
    for (int64_t first = 0; first < n; first += kChunk)
        range(dgate + first, dup + first, dh + first, gate + first, up + first, std::min(kChunk, n - first));
}

}  // namespace

void swiglu_forward(float* h, const float* gate, const float* up, size_t count) {
    forward_chunks(swiglu_forward_range, h, gate, up, count);
}

void swiglu_forward_serial(float* h, const float* gate, const float* up, size_t count) {
    forward_chunks_serial(swiglu_forward_range, h, gate, up, count);
}

void swiglu_backward(float* dgate, float* dup, const float* dh, const float* gate, const float* up, size_t count) {
    backward_chunks(swiglu_backward_range, dgate, dup, dh, gate, up, count);
}

void relu2_glu_forward(float* h, const float* gate, const float* up, size_t count) {
    forward_chunks(relu2_glu_forward_range, h, gate, up, count);
}

void relu2_glu_forward_serial(float* h, const float* gate, const float* up, size_t count) {
    forward_chunks_serial(relu2_glu_forward_range, h, gate, up, count);
}

void relu2_glu_backward(float* dgate, float* dup, const float* dh, const float* gate, const float* up, size_t count) {
    backward_chunks(relu2_glu_backward_range, dgate, dup, dh, gate, up, count);
}

GatedActivation parse_gated_activation(const std::string& name) {
    if (name == "silu") return GatedActivation::silu;
    if (name == "relu2") return GatedActivation::relu2;
    throw Error("unknown FFN activation " + quote_untrusted(name, 40) + ": use silu (SwiGLU) or relu2 (ReLU^2-GLU)");
}

const char* gated_activation_name(GatedActivation activation) {
    return activation == GatedActivation::relu2 ? "relu2" : "silu";
}

void gated_forward(GatedActivation activation, float* h, const float* gate, const float* up, size_t count) {
    if (activation == GatedActivation::relu2) return relu2_glu_forward(h, gate, up, count);
    swiglu_forward(h, gate, up, count);
}

void gated_forward_serial(GatedActivation activation, float* h, const float* gate, const float* up, size_t count) {
    if (activation == GatedActivation::relu2) return relu2_glu_forward_serial(h, gate, up, count);
    swiglu_forward_serial(h, gate, up, count);
}

void gated_backward(GatedActivation activation, float* dgate, float* dup, const float* dh, const float* gate,
                    const float* up, size_t count) {
    if (activation == GatedActivation::relu2) return relu2_glu_backward(dgate, dup, dh, gate, up, count);
    swiglu_backward(dgate, dup, dh, gate, up, count);
}

}  // namespace dqt
