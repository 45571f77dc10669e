#include "optim/adamw.h"

#include <cmath>

#include "optim/moment_blocks.h"

namespace dqt {

AdamBias::AdamBias(const AdamWConfig& config, int64_t t)
    : bias1(1.0f - std::pow(config.beta1, static_cast<float>(t))),
      bias2(1.0f - std::pow(config.beta2, static_cast<float>(t))) {}

AdamWStep::AdamWStep(const AdamWConfig& config, float lr, int64_t t, bool decay) {
    const AdamBias bias(config, t);
    k_.step_size = lr / bias.bias1;
    k_.inv_sqrt_bias2 = 1.0f / std::sqrt(bias.bias2);
    k_.keep = decay ? 1.0f - lr * config.weight_decay : 1.0f;
    k_.b1 = config.beta1;
    k_.b2 = config.beta2;
    k_.eps = config.eps;
}

void AdamWStep::apply(float* w, const float* g, TensorMoments& moments, size_t first, size_t last) const {
    for_each_moment_block(moments, first, last, [&](size_t block_first, size_t block_last, auto* m, auto* v) {
        for (size_t i = block_first; i < block_last; ++i) {
            const size_t j = i - block_first;
            float m_i = load_moment(m, j), v_i = load_moment(v, j);
            w[i] = adamw_element(k_, w[i], g[i - first], m_i, v_i);
            store_moment(m, j, m_i);
            store_moment(v, j, v_i);
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
