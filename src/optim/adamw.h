#pragma once
// AdamW with decoupled weight decay (Loshchilov & Hutter) on fp32 weights: the fp method's
// weights, bitnet's latent weights, and the fp32 tensors (norms, unquantized embedding and
// head) of a dqt model. PyTorch's order: decay, then the Adam step.
#include <cstddef>
#include <cstdint>

#include "optim/optimizer_state.h"
#include "optim/update_elements.h"

namespace dqt {

struct AdamWConfig {
    float beta1 = 0.9f;
    float beta2 = 0.95f;
    float eps = 1e-8f;
    float weight_decay = 0.1f;
};

// Bias corrections of step t (1-based): 1 - beta1^t and 1 - beta2^t.
struct AdamBias {
    float bias1, bias2;
    AdamBias(const AdamWConfig& config, int64_t t);
};

// One AdamW step of a tensor, applied to element ranges (each once, any order):
// w -= lr * wd * w (if decay); m, v updated; w -= lr * m_hat / (sqrt(v_hat) + eps).
class AdamWStep {
public:
    AdamWStep(const AdamWConfig& config, float lr, int64_t t, bool decay);
    // Elements [first, last) of weights w and moments (any storage); g points at element first.
    void apply(float* w, const float* g, TensorMoments& moments, size_t first, size_t last) const;
    const AdamWConstants& constants() const { return k_; }

private:
    AdamWConstants k_;
};

// Scalar float64 reference of the same update (tests compare against it).
void adamw_reference(double* w, double* m, double* v, const double* g, size_t count, bool decay,
                     const AdamWConfig& config, double lr, int64_t t);

}  // namespace dqt
