#include "optim/adamw.h"

#include <cmath>
#include <vector>

namespace dqt {

void adamw_step(ModelParameters& model, AdamWState& state, const AdamWConfig& config, float lr, int64_t t) {
    const float bias1 = 1.0f - std::pow(config.beta1, static_cast<float>(t));
    const float bias2 = 1.0f - std::pow(config.beta2, static_cast<float>(t));
    const float step_size = lr / bias1;
    const float inv_sqrt_bias2 = 1.0f / std::sqrt(bias2);
    const float b1 = config.beta1, b2 = config.beta2, eps = config.eps;
    for (const ParamTensor& tensor : model.layout.tensors) {
        float* w = model.values.data() + tensor.offset;
        const float* g = model.gradients.data() + tensor.offset;
        float* m = state.m.data() + tensor.offset;
        float* v = state.v.data() + tensor.offset;
        const float decay = tensor.is_matrix ? 1.0f - lr * config.weight_decay : 1.0f;
        const size_t count = tensor.count();
#pragma omp parallel for schedule(static)
        for (size_t i = 0; i < count; ++i) {
            m[i] = b1 * m[i] + (1.0f - b1) * g[i];
            v[i] = b2 * v[i] + (1.0f - b2) * g[i] * g[i];
            const float denom = std::sqrt(v[i]) * inv_sqrt_bias2 + eps;
            w[i] = w[i] * decay - step_size * m[i] / denom;
        }
    }
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

double gradient_global_norm(const ModelParameters& model) {
    // Fixed-size chunks summed in index order: the partition does not depend on threads.
    constexpr size_t kChunk = 1 << 14;
    const float* g = model.gradients.data();
    const size_t total = model.layout.total;
    const size_t chunks = (total + kChunk - 1) / kChunk;
    std::vector<double> partial(chunks, 0.0);
#pragma omp parallel for schedule(static)
    for (size_t chunk = 0; chunk < chunks; ++chunk) {
        const size_t end = std::min(total, (chunk + 1) * kChunk);
        double sum = 0.0;
        for (size_t i = chunk * kChunk; i < end; ++i) sum += static_cast<double>(g[i]) * g[i];
        partial[chunk] = sum;
    }
    double sum = 0.0;
    for (double value : partial) sum += value;
    return std::sqrt(sum);
}

void scale_gradients(ModelParameters& model, float factor) {
    float* g = model.gradients.data();
    const size_t total = model.layout.total;
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < total; ++i) g[i] *= factor;
}

}  // namespace dqt
