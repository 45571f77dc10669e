#include "optim/optimizer.h"

#include <algorithm>

namespace dqt {

static_assert(kGradientPieceAlign % kStateBlock == 0, "gradient pieces must hold whole 8-bit state blocks");

TensorUpdate::TensorUpdate(ModelParameters& model, const ParamTensor& tensor, OptimizerState& state,
                           const AdamWConfig& config, float lr, int64_t t, uint64_t seed)
    : values_(tensor.stores_codes() ? nullptr : model.value(tensor)), moments_(state.of(tensor)) {
    if (tensor.stores_codes()) {
        const CodedTensor coded{model.code(tensor), &model.scale(tensor), tensor.count(), model.method.grid,
                                tensor.tensor_id};
        dqt_.emplace(coded, config, lr, t,
                     DqtRounding{model.method.rounding, seed, model.method.scale_rule, tensor.residual_bits,
                                 tensor.residual_bits > 0 ? model.method.residual_overhang : 0});
    } else {
        adamw_.emplace(config, lr, t, tensor.is_matrix());
    }
}

void TensorUpdate::apply(const float* g, size_t first, size_t last) {
    if (dqt_) {
        dqt_->apply(g, moments_, first, last, &code_gradient_dot_);
    } else {
        adamw_->apply(values_, g, moments_, first, last);
    }
}

void TensorUpdate::finish(ExactSum whole_tensor_dot) {
    if (dqt_) dqt_->finish(moments_, exact_sum_value(whole_tensor_dot));
}

void optimizer_step_range(ModelParameters& model, const float* gradients, size_t begin, size_t end,
                          OptimizerState& state, const AdamWConfig& config, float lr, int64_t t, uint64_t seed,
                          const SumOverRanks& sum_over_ranks) {
    // Every tensor is applied before any is finished, so that the learned scales' gradient
    // sums of all ranks can be combined in one exchange.
    std::vector<TensorUpdate> updates;
    updates.reserve(model.layout.tensors.size());
    std::vector<ExactSum> dots;
    for (const ParamTensor& tensor : model.layout.tensors) {
        TensorUpdate& update = updates.emplace_back(model, tensor, state, config, lr, t, seed);
        const size_t first = std::max(tensor.flat_offset, begin), last = std::min(tensor.flat_offset + tensor.count(), end);
        if (first < last) update.apply(gradients + (first - begin), first - tensor.flat_offset, last - tensor.flat_offset);
        dots.push_back(update.code_gradient_dot());
    }
    if (model.method.scale_rule == ScaleRule::learned && sum_over_ranks) sum_over_ranks(dots);
    for (size_t k = 0; k < updates.size(); ++k) updates[k].finish(dots[k]);
}

float clip_factor(double norm, float clip) {
    return clip > 0.0f && norm > clip ? static_cast<float>(clip / norm) : 1.0f;
}

void clip_gradients(float* gradients, size_t count, double norm, float clip) {
    const float factor = clip_factor(norm, clip);
    if (factor == 1.0f) return;
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < count; ++i) gradients[i] *= factor;
}

}  // namespace dqt
