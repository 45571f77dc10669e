#include "optim/adamw.h"

#include <cmath>

#include "optim/optimizer_state.h"

namespace dqt {

AdamBias::AdamBias(const AdamWConfig& config, int64_t t)
    : bias1(1.0f - std::pow(config.beta1, static_cast<float>(t))),
      bias2(1.0f - std::pow(config.beta2, static_cast<float>(t))) {}

template <typename Moment>
void adamw_update(float* w, const float* g, Moment* m, Moment* v, size_t count, bool decay,
                  const AdamWConfig& config, float lr, int64_t t) {
    const AdamBias bias(config, t);
    const float step_size = lr / bias.bias1;
    const float inv_sqrt_bias2 = 1.0f / std::sqrt(bias.bias2);
    const float b1 = config.beta1, b2 = config.beta2, eps = config.eps;
    const float keep = decay ? 1.0f - lr * config.weight_decay : 1.0f;
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < count; ++i) {
        const float m_i = b1 * load_moment(m, i) + (1.0f - b1) * g[i];
        const float v_i = b2 * load_moment(v, i) + (1.0f - b2) * g[i] * g[i];
        store_moment(m, i, m_i);
        store_moment(v, i, v_i);
        const float denom = std::sqrt(v_i) * inv_sqrt_bias2 + eps;
        w[i] = w[i] * keep - step_size * m_i / denom;
    }
}

template void adamw_update<float>(float*, const float*, float*, float*, size_t, bool, const AdamWConfig&, float,
                                  int64_t);
template void adamw_update<uint16_t>(float*, const float*, uint16_t*, uint16_t*, size_t, bool, const AdamWConfig&,
                                     float, int64_t);

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
