#include "train/training_step.h"

#include <cmath>

#include "core/error.h"

namespace dqt {

namespace {

void scale_in_place(float* x, size_t count, float factor) {
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < count; ++i) x[i] *= factor;
}

}  // namespace

TrainingStep::TrainingStep(ModelParameters& model, OptimizerState& state, const AdamWConfig& adam, float grad_clip,
                           bool fused_update, uint64_t seed, int micro_batches, Communicator& comm,
                           const ShardPlan& plan, CommCompression compression)
    : model_(model),
      state_(state),
      adam_(adam),
      grad_clip_(grad_clip),
      seed_(seed),
      micro_batches_(micro_batches),
      comm_(comm),
      plan_(plan) {
    require(plan.ranks == comm.size(), "internal error: shard plan for " + std::to_string(plan.ranks) +
                                           " ranks in a group of " + std::to_string(comm.size()));
    require(micro_batches % comm.size() == 0,
            std::to_string(micro_batches) + " micro-batches per step cannot be shared by " +
                std::to_string(comm.size()) + " ranks: --grad-accum must be a multiple of the rank count");
    if (fused_update) {
        require(comm.size() == 1, "--fused-update runs on one rank: it updates each weight inside the backward "
                                  "pass, before the other ranks' gradients could arrive");
        require(micro_batches == 1, "fused updates take one micro-batch per step");
        fused_.emplace(model, state, adam, seed);
        return;
    }
    const int leaves = micro_batches / comm.size();
    accumulator_.emplace(model, comm.rank() * leaves, leaves);
    if (comm.size() == 1) return;
    exchange_.emplace(model, *accumulator_, plan, comm, leaves, compression.gradient_bits);
    if (compression.weight_bits != 0) weight_gather_.emplace(model, plan, comm, compression.weight_bits);
}

Array<float>* TrainingStep::gradient_residual() {
    return exchange_ && exchange_->residual().size() > 0 ? &exchange_->residual() : nullptr;
}

Array<float>* TrainingStep::weight_master() { return weight_gather_ ? &weight_gather_->master() : nullptr; }

TrainingStep::Result TrainingStep::run(Activations& acts, float grad_scale, float lr, int64_t t,
                                       const std::function<void(int micro)>& fill) {
    comm_.reset_counters();
    Result result =
        fused_ ? run_fused(acts, grad_scale, lr, t, fill) : run_unfused(acts, grad_scale, lr, t, fill);
    result.gradient_bytes = comm_.bytes_sent(Traffic::gradients);
    result.weight_bytes = comm_.bytes_sent(Traffic::weights);
    result.other_bytes = comm_.bytes_sent(Traffic::other);
    previous_grad_norm = result.grad_norm;
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
    const int leaves = micro_batches_ / comm_.size();
    if (exchange_) exchange_->begin_step();
    std::vector<double> losses;  // (leaves) of this rank
    for (int leaf = 0; leaf < leaves; ++leaf) {
        accumulator_->begin_leaf(leaf);
        fill(comm_.rank() * leaves + leaf);
        losses.push_back(model_forward(model_, acts, true));
        model_backward(model_, acts, grad_scale, *accumulator_);
    }
    Result result;
    // The step's gradient of the positions this process updates, [begin, end) of the flat order.
    float* gradient = nullptr;
    size_t begin = 0, end = model_.layout.total;
    if (exchange_) {
        // Summed in micro-batch order, as one process would.
        for (double loss : comm_.allgather(losses, std::vector<int>(static_cast<size_t>(comm_.size()), leaves))) {
            result.loss_sum += loss;
        }
        gradient = exchange_->reduce();
        result.exchange_wait_seconds = exchange_->last_wait_seconds();
        result.grad_norm = exchange_->global_norm();
        begin = plan_.begin(comm_.rank());
        end = plan_.end(comm_.rank());
    } else {
        for (double loss : losses) result.loss_sum += loss;
        accumulator_->check_complete();
        accumulator_->fold(begin, end);
        gradient = accumulator_->slot(0);
        result.grad_norm = std::sqrt(sum_of_squares(gradient, end - begin));
    }
    if (skip_nonfinite && !(std::isfinite(result.loss_sum) && std::isfinite(result.grad_norm))) {
        result.skipped = true;
        if (exchange_) exchange_->drop_residual();  // it may hold the non-finite values
        return result;
    }
    const float factor = clip_factor(result.grad_norm, grad_clip_);
    if (factor != 1.0f) scale_in_place(gradient, end - begin, factor);
    if (!exchange_) {
        optimizer_step_range(model_, gradient, begin, end, state_, adam_, lr, t, seed_, [](std::vector<ExactSum>&) {});
        return result;
    }
    // Each rank updated its shard: the learned scales' gradient sums go over every rank, then
    // the new weights are all-gathered.
    if (weight_gather_) weight_gather_->begin_update();
    optimizer_step_range(model_, gradient, begin, end, state_, adam_, lr, t, seed_,
                         [this](std::vector<ExactSum>& dots) { comm_.sum_exact(dots); });
    if (weight_gather_) {
        weight_gather_->finish_update();
    } else {
        comm_.allgather_in_place(model_.values.data(), plan_.value_cut, sizeof(float), Traffic::weights);
    }
    comm_.allgather_in_place(model_.codes.data(), plan_.code_cut, 1, Traffic::weights);
    return result;
}

}  // namespace dqt
