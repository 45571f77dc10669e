#include "optim/dqt_update.h"

#include <algorithm>
#include <cmath>
#include <mutex>

#include "core/error.h"
#include "kernels/vecmath.h"
#include "optim/moment_blocks.h"

namespace dqt {

namespace {

using UpdateConstants = DqtStepConstants;

// Elements [first, last) (first a multiple of 4; g, m, v point at element first) in blocks:
// codes decoded into a small array, the arithmetic in a loop that vectorises, codes written
// back. A range holds whole packed bytes, so no two threads touch the same byte.
// With dot (a learned scale), also adds sum g_i q_i of the old codes (optim/scale_gradient.h).
// With r (sub-grid residuals, pointing at element first), the weight is q + r / R grid steps
// (R = 2^residual_bits): it is rounded stochastically onto that finer grid, then split into the
// nearest code and what remains. Stochastic and WithResidual are k's, fixed per instantiation
// so that the element loop has no branch. Always inlined, so that it is compiled for the
// instruction set of the clone that calls it (a call would run the baseline x86-64 code).
template <bool Stochastic, bool WithResidual, typename Moment>
[[gnu::always_inline]] inline void update_range(const UpdateConstants& constants, uint8_t* codes, const float* g,
                                               Moment* m, Moment* v, int8_t* r, size_t first, size_t last,
                                               ExactSum* dot) {
    // A copy that no store can reach: the residuals' int8_t stores may alias any object, so
    // with a reference every element would reload the constants.
    const UpdateConstants k = constants;
    constexpr size_t kBlock = 256;
    const float inv_old_scale = 1.0f / k.old_scale;
    float q[kBlock];  // codes as floats, then the new codes
    float u[kBlock] = {};  // rounding uniforms (stay 0 under nearest rounding, which ignores them)
    for (size_t begin = first; begin < last; begin += kBlock) {
        const size_t n = std::min(kBlock, last - begin);
        for (size_t i = 0; i < n; ++i) q[i] = static_cast<float>(read_code(codes, k.grid, begin + i));
        if constexpr (Stochastic) {
            for (size_t i = 0; i < n; i += 4) {
                const std::array<float, 4> draw = rounding_uniforms(k.seed, k.t, k.tensor_id, (begin + i) / 4);
                for (size_t j = 0; j < 4; ++j) u[i + j] = draw[j];
            }
        }
        const float* g_block = g + (begin - first);
        Moment* m_block = m + (begin - first);
        Moment* v_block = v + (begin - first);
        int8_t* r_block = WithResidual ? r + (begin - first) : nullptr;
        if (dot) {
            int64_t block_sum = 0;  // kBlock terms of at most 2^52 each fit
            for (size_t i = 0; i < n; ++i) block_sum += exact_term(static_cast<double>(g_block[i]) * q[i]);
            *dot += block_sum;
        }
        if constexpr (WithResidual) {
            // Exact in float: |q R + r| < 2^24, and R is a power of two.
            for (size_t i = 0; i < n; ++i) q[i] += static_cast<float>(r_block[i]) * k.inv_residual_steps;
        }
        for (size_t i = 0; i < n; ++i) {
            float m_i = load_moment(m_block, i), v_i = load_moment(v_block, i);
            q[i] = dqt_update_element_as<Stochastic, WithResidual>(k, inv_old_scale, q[i], g_block[i], m_i, v_i, u[i],
                                                                   WithResidual ? r_block + i : nullptr);
            store_moment(m_block, i, m_i);
            store_moment(v_block, i, v_i);
        }
        for (size_t i = 0; i < n; ++i) write_code(codes, k.grid, begin + i, static_cast<int>(q[i]));
    }
}

// One instantiation of update_range per rounding mode and residual choice, picked once a range.
template <typename Moment>
[[gnu::always_inline]] inline void update_range(const UpdateConstants& k, uint8_t* codes, const float* g, Moment* m,
                                               Moment* v, int8_t* r, size_t first, size_t last, ExactSum* dot) {
    with_update_choices(k, [&](auto stochastic, auto with_residual) __attribute__((always_inline)) {
        update_range<decltype(stochastic)::value, decltype(with_residual)::value>(k, codes, g, m, v, r, first, last,
                                                                                  dot);
    });
}

// Cloned for AVX-512 / AVX2, where floor, nearbyint and sqrt are single instructions.
DQT_TARGET_CLONES void update_range_f32(const UpdateConstants& k, uint8_t* codes, const float* g, float* m, float* v,
                                        int8_t* r, size_t first, size_t last, ExactSum* dot) {
    update_range(k, codes, g, m, v, r, first, last, dot);
}
DQT_TARGET_CLONES void update_range_bf16(const UpdateConstants& k, uint8_t* codes, const float* g, uint16_t* m,
                                         uint16_t* v, int8_t* r, size_t first, size_t last, ExactSum* dot) {
    update_range(k, codes, g, m, v, r, first, last, dot);
}
void update_range_any(const UpdateConstants& k, uint8_t* codes, const float* g, float* m, float* v, int8_t* r,
                      size_t first, size_t last, ExactSum* dot) {
    update_range_f32(k, codes, g, m, v, r, first, last, dot);
}
void update_range_any(const UpdateConstants& k, uint8_t* codes, const float* g, uint16_t* m, uint16_t* v, int8_t* r,
                      size_t first, size_t last, ExactSum* dot) {
    update_range_bf16(k, codes, g, m, v, r, first, last, dot);
}

}  // namespace

DqtStepConstants dqt_step_constants(const CodeGrid& grid, float old_scale, int top_code, const AdamWConfig& config,
                                    float lr, int64_t t, const DqtRounding& rounding, int tensor_id) {
    DqtStepConstants k;
    const AdamBias bias(config, t);
    k.learned_scale = rounding.scale_rule == ScaleRule::learned;
    k.grid = grid;
    k.old_scale = old_scale;
    k.new_scale = k.learned_scale ? old_scale : reference_rule_scale(old_scale, grid.qp(), top_code);
    k.step_size = lr * std::sqrt(bias.bias2) / bias.bias1;
    k.keep = 1.0f - lr * config.weight_decay;
    k.b1 = config.beta1;
    k.b2 = config.beta2;
    k.eps = config.eps;
    k.stochastic = rounding.mode == Rounding::stochastic;
    k.seed = rounding.seed;
    k.t = t;
    k.tensor_id = tensor_id;
    k.residual_steps = rounding.residual_bits > 0 ? static_cast<float>(1 << rounding.residual_bits) : 0.0f;
    k.inv_residual_steps = rounding.residual_bits > 0 ? 1.0f / k.residual_steps : 0.0f;
    require(rounding.residual_overhang == 0 || rounding.residual_bits > 0,
            "DqtStep: an overhang needs sub-grid residuals (tensor " + std::to_string(tensor_id) + ")");
    k.overhang = static_cast<float>(rounding.residual_overhang);
    return k;
}

float learned_scale_after_step(const DqtStepConstants& k, float* scale_moments, double code_gradient_dot) {
    const float grid_step = 1.0f / k.old_scale;
    const float g = grid_step * static_cast<float>(code_gradient_dot);  // dL/dlog d
    float& m = scale_moments[0];
    float& v = scale_moments[1];
    m = k.b1 * m + (1.0f - k.b1) * g;
    v = k.b2 * v + (1.0f - k.b2) * g * g;
    const float log_step_change = -k.step_size * m / (std::sqrt(v) + k.eps);
    return k.old_scale * std::exp(-log_step_change);  // s = 1 / d
}

DqtStep::DqtStep(const CodedTensor& tensor, const AdamWConfig& config, float lr, int64_t t,
                 const DqtRounding& rounding)
    : tensor_(tensor) {
    // The learned rule rounds in the old grid: no top code to look for.
    const int top = rounding.scale_rule == ScaleRule::learned ? 0 : max_code(tensor.codes, tensor.count, tensor.grid);
    k_ = dqt_step_constants(tensor.grid, *tensor.scale, top, config, lr, t, rounding, tensor.tensor_id);
}

void DqtStep::apply(const float* g, TensorMoments& moments, size_t first, size_t last,
                    ExactSum* code_gradient_dot) const {
    ExactSum* dot = k_.learned_scale ? code_gradient_dot : nullptr;
    // Each block runs on some thread: it sums its own part, then adds it under a lock (integer
    // addition is exact, so the order in which threads add does not matter).
    std::mutex dot_lock;
    require(k_.residual_steps == 0.0f || moments.residual.size() == moments.count,
            "DqtStep: the optimizer state holds no sub-grid residuals for tensor " + std::to_string(k_.tensor_id));
    int8_t* residual = k_.residual_steps > 0.0f ? moments.residual.data() : nullptr;
    for_each_moment_block(moments, first, last, [&](size_t block_first, size_t block_last, auto* m, auto* v) {
        ExactSum part = 0;
        update_range_any(k_, tensor_.codes, g + (block_first - first), m, v,
                         residual ? residual + (block_first - moments.first) : nullptr, block_first, block_last,
                         dot ? &part : nullptr);
        if (dot) {
            const std::lock_guard<std::mutex> hold(dot_lock);
            *dot += part;
        }
    });
}

void DqtStep::finish(TensorMoments& moments, double code_gradient_dot) const {
    *tensor_.scale = k_.learned_scale ? learned_scale_after_step(k_, moments.scale_moments, code_gradient_dot)
                                      : k_.new_scale;
}

void start_residuals(const float* w, size_t count, float scale, const CodeGrid& grid, int residual_bits,
                     int residual_overhang, const uint8_t* codes, size_t first, int8_t* residuals) {
    const int steps = 1 << residual_bits;
    for (size_t i = 0; i < count; ++i) {
        const int q = read_code(codes, grid, first + i);
        // The code's cell on the fine grid: half a step either side, or the overhang past an end.
        const int lowest = q == grid.qn() && residual_overhang > 0 ? -residual_overhang * steps : -steps / 2;
        const int highest = q == grid.qp() && residual_overhang > 0 ? residual_overhang * steps : steps / 2 - 1;
        const float offset = std::nearbyint((w[i] * scale - static_cast<float>(q)) * static_cast<float>(steps));
        residuals[i] = static_cast<int8_t>(std::clamp(offset, static_cast<float>(lowest), static_cast<float>(highest)));
    }
}

double dqt_update_reference(int* q, double scale, double* m, double* v, const double* g, const float* u,
                            size_t count, const CodeGrid& grid, const AdamWConfig& config, double lr, int64_t t,
                            Rounding mode, ScaleRule scale_rule, double& scale_m, double& scale_v, int* r,
                            int residual_bits, int residual_overhang) {
    int top = grid.qn() - 1;
    double code_gradient_dot = 0.0;
    for (size_t i = 0; i < count; ++i) {
        top = std::max(top, q[i]);
        code_gradient_dot += g[i] * q[i];
    }
    const bool learned = scale_rule == ScaleRule::learned;
    const double new_scale = !learned && top > 0 ? grid.qp() / (top / scale) : scale;  // qp / max(W_prev)
    const double bias1 = 1.0 - std::pow(static_cast<double>(config.beta1), static_cast<double>(t));
    const double bias2 = 1.0 - std::pow(static_cast<double>(config.beta2), static_cast<double>(t));
    const double steps = residual_bits > 0 ? std::ldexp(1.0, residual_bits) : 1.0;  // R
    for (size_t i = 0; i < count; ++i) {
        const double w = (q[i] + (residual_bits > 0 ? r[i] / steps : 0.0)) / scale;
        m[i] = config.beta1 * m[i] + (1.0 - config.beta1) * g[i];
        v[i] = config.beta2 * v[i] + (1.0 - config.beta2) * g[i] * g[i];
        const double w1 = w - lr * std::sqrt(bias2) / bias1 * m[i] / (std::sqrt(v[i]) + config.eps);
        const double w2 = w1 - lr * config.weight_decay * w1;
        const double x = std::clamp(w2 * new_scale, static_cast<double>(grid.qn() - residual_overhang),
                                    static_cast<double>(grid.qp() + residual_overhang));
        const double fine = x * steps;
        const double lower = std::floor(fine);
        const double rounded = mode == Rounding::stochastic ? lower + (u[i] < fine - lower ? 1.0 : 0.0) : std::nearbyint(fine);
        if (residual_bits == 0) {
            q[i] = static_cast<int>(rounded);
            continue;
        }
        q[i] = std::clamp(static_cast<int>(std::floor(rounded / steps + 0.5)), grid.qn(), grid.qp());
        r[i] = static_cast<int>(rounded - q[i] * steps);
    }
    if (!learned) return new_scale;
    // W = q d with d = 1 / scale: dL/dlog d = d * sum_i g_i q_i.
    const double log_gradient = code_gradient_dot / scale;
    scale_m = config.beta1 * scale_m + (1.0 - config.beta1) * log_gradient;
    scale_v = config.beta2 * scale_v + (1.0 - config.beta2) * log_gradient * log_gradient;
    const double log_grid_step = std::log(1.0 / scale) - lr * std::sqrt(bias2) / bias1 * scale_m / (std::sqrt(scale_v) + config.eps);
    return 1.0 / std::exp(log_grid_step);
}

}  // namespace dqt
