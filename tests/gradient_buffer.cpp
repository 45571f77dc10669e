#include "gradient_buffer.h"

#include <cmath>
#include <cstring>

namespace dqt {

GradientBuffer::GradientBuffer(const ParamLayout& layout) : data_(MemCategory::gradients, layout.total) {}

void GradientBuffer::zero() { std::memset(data_.data(), 0, data_.bytes()); }

double GradientBuffer::global_norm() const { return std::sqrt(sum_of_squares(data_.data(), data_.size())); }

void GradientBuffer::scale(float factor) {
    float* g = data_.data();
    for (size_t i = 0; i < data_.size(); ++i) g[i] *= factor;
}

void optimizer_step(ModelParameters& model, const GradientBuffer& gradients, OptimizerState& state,
                    const AdamWConfig& config, float lr, int64_t t, uint64_t seed) {
    optimizer_step_range(model, gradients.values().data(), 0, model.layout.total, state, config, lr, t, seed);
}

}  // namespace dqt
