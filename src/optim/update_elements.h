#pragma once
// One element of each optimizer update, shared by the CPU loops (optim/adamw.cpp,
// optim/dqt_update.cpp) and the CUDA kernels (src/cuda/optimizer_update.cu) so that both write
// the same weights, codes and moments bit for bit. Both sides compile it without contracting a multiply and an add into
// one fused instruction (-ffp-contract=off, nvcc --fmad=false), and both divide and take square
// roots as IEEE-754 says (correctly rounded), so each operation below rounds alike.
#include <cstdint>
#include <type_traits>

#include "core/host_device.h"
#include "quant/codes.h"
#include "quant/rounding.h"

namespace dqt {

// AdamW (optim/adamw.h) of one fp32 tensor's step.
struct AdamWConstants {
    float step_size;       // lr / (1 - b1^t)
    float inv_sqrt_bias2;  // 1 / sqrt(1 - b2^t)
    float keep;            // 1 - lr * wd, or 1 without decay
    float b1, b2, eps;
};

// Element i: weight w, gradient g, moments m and v (updated; the caller stores them). Returns
// the new weight. PyTorch's order: decay, then the Adam step.
DQT_HOST_DEVICE inline float adamw_element(const AdamWConstants& k, float w, float g, float& m, float& v) {
    m = k.b1 * m + (1.0f - k.b1) * g;
    v = k.b2 * v + (1.0f - k.b2) * g * g;
    const float denom = sqrtf(v) * k.inv_sqrt_bias2 + k.eps;
    return w * k.keep - k.step_size * m / denom;
}

// What one DQT step of one tensor needs, fixed for all its elements.
struct DqtStepConstants {
    CodeGrid grid;
    float old_scale, new_scale;  // new_scale: the scale the codes are rounded with
    float step_size;  // lr * sqrt(1 - b2^t) / (1 - b1^t)
    float keep;       // 1 - lr * wd
    float b1, b2, eps;
    bool stochastic;
    bool learned_scale;
    uint64_t seed;
    int64_t t;
    int tensor_id;
    float residual_steps;      // R = 2^residual_bits sub-grid steps a grid step; 0: no residual
    float inv_residual_steps;  // 1 / R
    float overhang;            // with a residual: grid steps the position may lie past qn and qp
};

// The reference rule's rounding scale: qp / max(W) of the pre-update tensor, from its top code.
DQT_HOST_DEVICE inline float reference_rule_scale(float old_scale, int qp, int top_code) {
    return top_code > 0 ? old_scale * static_cast<float>(qp) / static_cast<float>(top_code) : old_scale;
}

// Element i: position = its weight in grid steps (q, plus r / R with residuals), g its gradient,
// m and v its moments (updated; the caller stores them in their dtype), u its rounding uniform,
// inv_old_scale = 1 / k.old_scale. Returns the new code; with residuals also sets *residual.
// The position is clipped to [qn - H, qp + H] (H = k.overhang, 0 without a residual) and the
// code to [qn, qp]: beyond the outer codes, r counts how far past them the weight lies.
// Stochastic and WithResidual must be k.stochastic and k.residual_steps != 0: as template
// arguments they leave a CPU loop over elements without branches, so it vectorises.
template <bool Stochastic, bool WithResidual>
DQT_HOST_DEVICE inline float dqt_update_element_as(const DqtStepConstants& k, float inv_old_scale, float position,
                                                   float g, float& m, float& v, float u, int8_t* residual) {
    const float qn = static_cast<float>(k.grid.qn()), qp = static_cast<float>(k.grid.qp());
    m = k.b1 * m + (1.0f - k.b1) * g;
    v = k.b2 * v + (1.0f - k.b2) * g * g;
    const float stepped = position * inv_old_scale - k.step_size * m / (sqrtf(v) + k.eps);
    float x = stepped * k.keep * k.new_scale;
    const float lowest = qn - k.overhang, highest = qp + k.overhang;
    x = x < lowest ? lowest : x;  // clip to [qn - H, qp + H]; NaN stays NaN on both sides
    x = highest < x ? highest : x;
    if constexpr (!WithResidual) {
        return Stochastic ? stochastic_round(x, u) : nearest_round(x);
    } else {
        const float fine = x * k.residual_steps;  // in [(qn - H) R, (qp + H) R]
        const float rounded = Stochastic ? stochastic_round(fine, u) : nearest_round(fine);
        float q = floorf((rounded + 0.5f * k.residual_steps) * k.inv_residual_steps);  // nearest, ties up
        q = q < qn ? qn : q;  // only with an overhang can the nearest lie past the outer codes
        q = qp < q ? qp : q;
        *residual = static_cast<int8_t>(rounded - q * k.residual_steps);  // in [-R/2, R/2), or to H R at the ends
        return q;
    }
}

// Calls run(stochastic, with_residual) with k.stochastic and k.residual_steps != 0 as
// std::bool_constant arguments, so that run instantiates per choice: the one place the four
// choices are told apart. Always inlined (and so must run be), so that a CPU loop cloned for
// AVX2 or AVX-512 keeps its clone's instruction set.
template <typename Run>
DQT_HOST_DEVICE __attribute__((always_inline)) inline auto with_update_choices(const DqtStepConstants& k, Run&& run) {
    const bool residual_on = k.residual_steps != 0.0f;
    if (k.stochastic) return residual_on ? run(std::true_type{}, std::true_type{}) : run(std::true_type{}, std::false_type{});
    return residual_on ? run(std::false_type{}, std::true_type{}) : run(std::false_type{}, std::false_type{});
}

// The same with the two choices read from k (the GPU's kernel, one element a thread).
DQT_HOST_DEVICE inline float dqt_update_element(const DqtStepConstants& k, float inv_old_scale, float position,
                                                float g, float& m, float& v, float u, int8_t* residual) {
    return with_update_choices(k, [&](auto stochastic, auto with_residual) {
        return dqt_update_element_as<decltype(stochastic)::value, decltype(with_residual)::value>(
            k, inv_old_scale, position, g, m, v, u, residual);
    });
}

}  // namespace dqt
