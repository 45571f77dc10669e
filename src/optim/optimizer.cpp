#include "optim/optimizer.h"

#include <cmath>
#include <vector>

#include "optim/dqt_update.h"

namespace dqt {

namespace {

template <typename Moment>
void step_tensor(ModelParameters& model, const ParamTensor& tensor, Moment* m, Moment* v, const AdamWConfig& config,
                 float lr, int64_t t, uint64_t seed) {
    const float* g = model.grad(tensor);
    if (tensor.storage == TensorStorage::codes) {
        const CodedTensor coded{model.code(tensor), &model.scale(tensor), tensor.count(), model.method.grid,
                                tensor.tensor_id};
        dqt_update(coded, g, m, v, config, lr, t, DqtRounding{model.method.rounding, seed});
    } else {
        adamw_update(model.value(tensor), g, m, v, tensor.count(), tensor.is_matrix(), config, lr, t);
    }
}

}  // namespace

void optimizer_step(ModelParameters& model, OptimizerState& state, const AdamWConfig& config, float lr, int64_t t,
                    uint64_t seed) {
    for (const ParamTensor& tensor : model.layout.tensors) {
        if (state.dtype() == StateDtype::fp32) {
            step_tensor(model, tensor, static_cast<float*>(state.m_bytes(tensor.offset)),
                        static_cast<float*>(state.v_bytes(tensor.offset)), config, lr, t, seed);
        } else {
            step_tensor(model, tensor, static_cast<uint16_t*>(state.m_bytes(tensor.offset)),
                        static_cast<uint16_t*>(state.v_bytes(tensor.offset)), config, lr, t, seed);
        }
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
