#include "train/training_step.h"

#include "core/error.h"

namespace dqt {

TrainingStep::TrainingStep(ModelParameters& model, OptimizerState& state, const AdamWConfig& adam, float grad_clip,
                           bool fused_update, uint64_t seed)
    : model_(model), state_(state), adam_(adam), grad_clip_(grad_clip), seed_(seed) {
    if (fused_update) {
        fused_.emplace(model, state, adam, seed);
    } else {
        gradients_.emplace(model.layout);
    }
}

TrainingStep::Result TrainingStep::run(Activations& acts, int micro_batches, float grad_scale, float lr, int64_t t,
                                       const std::function<void(int micro)>& fill) {
    Result result;
    if (fused_) {
        require(micro_batches == 1, "fused updates take one micro-batch per step");
        // Each weight is updated inside the backward pass; clipping uses the last step's norm.
        fused_->begin_step(lr, t, clip_factor(previous_grad_norm, grad_clip_));
        fill(0);
        result.loss_sum = model_forward(model_, acts, true);
        model_backward(model_, acts, grad_scale, *fused_);
        result.grad_norm = fused_->gradient_norm();
    } else {
        gradients_->zero();
        for (int micro = 0; micro < micro_batches; ++micro) {
            fill(micro);
            result.loss_sum += model_forward(model_, acts, true);
            model_backward(model_, acts, grad_scale, *gradients_);
        }
        result.grad_norm = gradients_->global_norm();
        const float factor = clip_factor(result.grad_norm, grad_clip_);
        if (factor != 1.0f) gradients_->scale(factor);
        optimizer_step(model_, *gradients_, state_, adam_, lr, t, seed_);
    }
    previous_grad_norm = result.grad_norm;
    return result;
}

}  // namespace dqt
