#pragma once
// AdamW with decoupled weight decay (Loshchilov & Hutter), fp32 state, applied to the flat
// parameter array of a model. Decay applies only to tensors marked is_matrix.
#include <cstdint>

#include "core/memory.h"
#include "model/parameters.h"

namespace dqt {

struct AdamWConfig {
    float beta1 = 0.9f;
    float beta2 = 0.95f;
    float eps = 1e-8f;
    float weight_decay = 0.1f;
};

struct AdamWState {
    Array<float> m;  // (total) first moment, category optimizer
    Array<float> v;  // (total) second moment, category optimizer
    explicit AdamWState(size_t count)
        : m(MemCategory::optimizer, count), v(MemCategory::optimizer, count) {}
};

// One update with learning rate lr at 1-based step t (for bias correction):
// w -= lr * wd * w (matrices only); m, v updated; w -= lr * m_hat / (sqrt(v_hat) + eps).
void adamw_step(ModelParameters& model, AdamWState& state, const AdamWConfig& config, float lr, int64_t t);

// Scalar float64 reference of the same update on one array (tests compare against it).
void adamw_reference(double* w, double* m, double* v, const double* g, size_t count, bool decay,
                     const AdamWConfig& config, double lr, int64_t t);

// L2 norm of all gradients, summed in a fixed order (same bits for any thread count).
double gradient_global_norm(const ModelParameters& model);
// Multiplies every gradient by factor.
void scale_gradients(ModelParameters& model, float factor);

}  // namespace dqt
