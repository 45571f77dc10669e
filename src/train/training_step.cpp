#include "train/training_step.h"

#include <cmath>

#include "core/error.h"
#include "data_parallel/shard_plan.h"
#include "train/data_parallel_step.h"

namespace dqt {

TrainingStep::TrainingStep(ModelParameters& model, OptimizerState& state, const AdamWConfig& adam, float grad_clip,
                           bool fused_update, uint64_t seed, int micro_batches, const StepGroup* group)
    : model_(model), state_(state), adam_(adam), grad_clip_(grad_clip), seed_(seed), leaves_(micro_batches) {
    const int ranks = group ? group->comm.size() : 1;
    if (group) {
        require(group->plan.ranks == ranks, "internal error: shard plan for " + std::to_string(group->plan.ranks) +
                                                " ranks in a group of " + std::to_string(ranks));
    }
    require(micro_batches % ranks == 0, std::to_string(micro_batches) + " micro-batches per step cannot be shared by " +
                                            std::to_string(ranks) +
                                            " ranks: --grad-accum must be a multiple of the rank count");
    if (fused_update) {
        require(ranks == 1, "--fused-update runs on one rank: it updates each weight inside the backward "
                            "pass, before the other ranks' gradients could arrive");
        require(micro_batches == 1, "fused updates take one micro-batch per step");
        fused_.emplace(model, state, adam, seed);
        return;
    }
    leaves_ = micro_batches / ranks;
    first_micro_ = group ? group->comm.rank() * leaves_ : 0;
    accumulator_.emplace(model, first_micro_, leaves_);
    if (ranks == 1) return;
    data_parallel_ = std::make_unique<DataParallelStep>(model, state, adam, grad_clip, seed, *accumulator_, leaves_,
                                                        group->comm, group->plan, group->compression);
}

TrainingStep::~TrainingStep() = default;

Array<float>* TrainingStep::gradient_residual() {
    return data_parallel_ ? data_parallel_->gradient_residual() : nullptr;
}

Array<float>* TrainingStep::weight_master() { return data_parallel_ ? data_parallel_->weight_master() : nullptr; }

TrainingStep::Result TrainingStep::run(Activations& acts, float grad_scale, float lr, int64_t t,
                                       const std::function<void(int micro)>& fill) {
    Result result =
        fused_ ? run_fused(acts, grad_scale, lr, t, fill) : run_unfused(acts, grad_scale, lr, t, fill);
    // A skipped step's norm is not finite: the last finite one stays (a checkpoint stores it).
    if (std::isfinite(result.grad_norm)) previous_grad_norm = result.grad_norm;
    return result;
}

TrainingStep::Result TrainingStep::run_fused(Activations& acts, float grad_scale, float lr, int64_t t,
                                             const std::function<void(int)>& fill) {
    // Each weight is updated inside the backward pass; clipping uses the last step's norm.
    Result result;
    fused_->begin_step(lr, t, clip_factor(previous_grad_norm, grad_clip_));
    fill(0);
    result.loss_sum = model_forward(model_, acts, true);
    model_backward(model_, acts, grad_scale, *fused_);
    result.grad_norm = fused_->gradient_norm();
    return result;
}

TrainingStep::Result TrainingStep::run_unfused(Activations& acts, float grad_scale, float lr, int64_t t,
                                               const std::function<void(int)>& fill) {
    if (data_parallel_) data_parallel_->begin_step();
    std::vector<double> losses;  // (leaves_) of this process
    for (int leaf = 0; leaf < leaves_; ++leaf) {
        accumulator_->begin_leaf(leaf);
        fill(first_micro_ + leaf);
        losses.push_back(model_forward(model_, acts, true));
        model_backward(model_, acts, grad_scale, *accumulator_);
    }
    if (data_parallel_) return data_parallel_->finish(losses, lr, t, skip_nonfinite);
    Result result;
    for (double loss : losses) result.loss_sum += loss;
    // The step's gradient, every flat position, summed into the accumulator's first slot.
    const size_t count = model_.layout.total;
    accumulator_->check_complete();
    accumulator_->fold(0, count);
    float* gradient = accumulator_->slot(0);
    result.grad_norm = std::sqrt(sum_of_squares(gradient, count));
    if (skip_nonfinite && !(std::isfinite(result.loss_sum) && std::isfinite(result.grad_norm))) {
        result.skipped = true;
        return result;
    }
    clip_gradients(gradient, count, result.grad_norm, grad_clip_);
    optimizer_step_range(model_, gradient, 0, count, state_, adam_, lr, t, seed_);
    return result;
}

}  // namespace dqt
