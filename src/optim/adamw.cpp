#include "optim/adamw.h"

#include <cmath>

#include "optim/moment_blocks.h"

namespace dqt {

AdamBias::AdamBias(const AdamWConfig& config, int64_t t)
    : bias1(1.0f - std::pow(config.beta1, static_cast<float>(t))),
      bias2(1.0f - std::pow(config.beta2, static_cast<float>(t))) {}

AdamWStep::AdamWStep(const AdamWConfig& config, float lr, int64_t t, bool decay)
    : b1_(config.beta1), b2_(config.beta2), eps_(config.eps) {
    const AdamBias bias(config, t);
    step_size_ = lr / bias.bias1;
    inv_sqrt_bias2_ = 1.0f / std::sqrt(bias.bias2);
    keep_ = decay ? 1.0f - lr * config.weight_decay : 1.0f;
}

void AdamWStep::apply(float* w, const float* g, TensorMoments& moments, size_t first, size_t last) const {
    for_each_moment_block(moments, first, last, [&](size_t block_first, size_t block_last, auto* m, auto* v) {
        for (size_t i = block_first; i < block_last; ++i) {
            const size_t j = i - block_first;
            const float g_i = g[i - first];
            const float m_i = b1_ * load_moment(m, j) + (1.0f - b1_) * g_i;
            const float v_i = b2_ * load_moment(v, j) + (1.0f - b2_) * g_i * g_i;
            store_moment(m, j, m_i);
            store_moment(v, j, v_i);
            const float denom = std::sqrt(v_i) * inv_sqrt_bias2_ + eps_;
            w[i] = w[i] * keep_ - step_size_ * m_i / denom;
        }
    });
}

void adamw_reference(double* w, double* m, double* v, const double* g, size_t count, bool decay,
                     const AdamWConfig& config, double lr, int64_t t) {
    const double bias1 = 1.0 - std::pow(static_cast<double>(config.beta1), static_cast<double>(t));
    const double bias2 = 1.0 - std::pow(static_cast<double>(config.beta2), static_cast<double>(t));
    for (size_t i = 0; i < count; ++i) {
        if (decay) w[i] -= lr * config.weight_decay * w[i];
        m[i] = config.beta1 * m[i] + (1.0 - config.beta1) * g[i];
        v[i] = config.beta2 * v[i] + (1.0 - config.beta2) * g[i] * g[i];
        const double m_hat = m[i] / bias1;
        const double v_hat = v[i] / bias2;
        w[i] -= lr * m_hat / (std::sqrt(v_hat) + config.eps);
    }
}

}  // namespace dqt
