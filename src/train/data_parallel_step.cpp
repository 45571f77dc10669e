#include "train/data_parallel_step.h"

#include <cmath>

namespace dqt {

DataParallelStep::DataParallelStep(ModelParameters& model, OptimizerState& state, const AdamWConfig& adam,
                                   float grad_clip, uint64_t seed, GradientAccumulator& accumulator, int leaves,
                                   Communicator& comm, const ShardPlan& plan, const CommCompression& compression)
    : model_(model),
      state_(state),
      adam_(adam),
      grad_clip_(grad_clip),
      seed_(seed),
      leaves_(leaves),
      comm_(comm),
      plan_(plan),
      exchange_(model, accumulator, plan, comm, leaves, compression.gradient_bits) {
    if (compression.weight_bits != 0) weight_gather_.emplace(model, plan, comm, compression.weight_bits);
}

Array<float>* DataParallelStep::gradient_residual() {
    return exchange_.residual().size() > 0 ? &exchange_.residual() : nullptr;
}

Array<float>* DataParallelStep::weight_master() { return weight_gather_ ? &weight_gather_->master() : nullptr; }

void DataParallelStep::begin_step() {
    comm_.reset_counters();
    exchange_.begin_step();
}

TrainingStep::Result DataParallelStep::finish(const std::vector<double>& losses, float lr, int64_t t,
                                              bool skip_nonfinite) {
    TrainingStep::Result result;
    // Summed in micro-batch order, as one process would.
    for (double loss : comm_.allgather(losses, std::vector<int>(static_cast<size_t>(comm_.size()), leaves_))) {
        result.loss_sum += loss;
    }
    // The step's gradient of this rank's shard, flat positions [begin, end).
    float* gradient = exchange_.reduce();
    result.exchange_wait_seconds = exchange_.last_wait_seconds();
    result.grad_norm = exchange_.global_norm();
    const size_t begin = plan_.begin(comm_.rank()), end = plan_.end(comm_.rank());
    if (skip_nonfinite && !(std::isfinite(result.loss_sum) && std::isfinite(result.grad_norm))) {
        result.skipped = true;
        exchange_.drop_residual();  // it may hold the non-finite values
    } else {
        clip_gradients(gradient, end - begin, result.grad_norm, grad_clip_);
        // Each rank updates its shard: the learned scales' gradient sums go over every rank,
        // then the new weights are all-gathered.
        if (weight_gather_) weight_gather_->begin_update();
        optimizer_step_range(model_, gradient, begin, end, state_, adam_, lr, t, seed_,
                             [this](std::vector<ExactSum>& dots) { comm_.sum_exact(dots); });
        if (weight_gather_) {
            weight_gather_->finish_update();
        } else {
            comm_.allgather_in_place(model_.values.data(), plan_.value_cut, sizeof(float), Traffic::weights);
        }
        comm_.allgather_in_place(model_.codes.data(), plan_.code_cut, 1, Traffic::weights);
    }
    result.gradient_bytes = comm_.bytes_sent(Traffic::gradients);
    result.weight_bytes = comm_.bytes_sent(Traffic::weights);
    result.other_bytes = comm_.bytes_sent(Traffic::other);
    return result;
}

}  // namespace dqt
