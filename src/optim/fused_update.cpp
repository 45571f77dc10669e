#include "optim/fused_update.h"

#include <cmath>

namespace dqt {

FusedUpdater::FusedUpdater(ModelParameters& model, OptimizerState& state, const AdamWConfig& config, uint64_t seed)
    : model_(model), state_(state), config_(config), seed_(seed) {}

void FusedUpdater::begin_step(float lr, int64_t t, float gradient_factor) {
    lr_ = lr;
    t_ = t;
    factor_ = gradient_factor;
    sum_squares_ = 0.0;
}

bool FusedUpdater::is_tied_table(const ParamTensor& tensor) const {
    return model_.config.tie_embeddings && &tensor == model_.tensors.token_embd;
}

size_t FusedUpdater::tied_gradient_bytes(const ModelConfig& config) {
    return config.tie_embeddings ? static_cast<size_t>(config.vocab_size) * config.dim * sizeof(float) : 0;
}

float* FusedUpdater::acquire(const ParamTensor& tensor, int row_begin, int row_end) {
    float* buffer = nullptr;
    if (is_tied_table(tensor)) {
        // The head's pass starts the table's gradient for this step; the lookup's pass adds to it.
        if (row_begin == 0 && !tied_head_pass_done_) tied_gradient_ = Array<float>(MemCategory::gradients, tensor.count());
        buffer = tied_gradient_.data() + static_cast<size_t>(row_begin) * tensor.cols;
        if (!tied_head_pass_done_) return buffer;  // nothing is updated before the lookup's pass
    } else {
        piece_ = Array<float>(MemCategory::gradients, static_cast<size_t>(row_end - row_begin) * tensor.cols);
        buffer = piece_.data();
    }
    // The first piece of a tensor starts its update, which reads the tensor as it is before
    // the step (the DQT scale).
    if (row_begin == 0) update_.emplace(model_, tensor, state_, config_, lr_, t_, seed_);
    return buffer;
}

void FusedUpdater::release(const ParamTensor& tensor, int row_begin, int row_end) {
    const bool tied = is_tied_table(tensor);
    if (tied && !tied_head_pass_done_) {  // only the lookup's pass completes the gradient
        tied_head_pass_done_ = row_end == tensor.rows;
        return;
    }
    const size_t count = static_cast<size_t>(row_end - row_begin) * tensor.cols;
    float* g = tied ? tied_gradient_.data() + static_cast<size_t>(row_begin) * tensor.cols : piece_.data();
    sum_squares_ += sum_of_squares(g, count);
    if (factor_ != 1.0f) {
#pragma omp parallel for schedule(static)
        for (size_t i = 0; i < count; ++i) g[i] *= factor_;
    }
    const size_t first = static_cast<size_t>(row_begin) * tensor.cols;
    update_->apply(g, first, first + count);
    if (row_end == tensor.rows) {
        update_->finish(update_->code_gradient_dot());
        update_.reset();
        if (tied) {
            tied_gradient_ = Array<float>();
            tied_head_pass_done_ = false;
        }
    }
    piece_ = Array<float>();
}

double FusedUpdater::gradient_norm() const { return std::sqrt(sum_squares_); }

}  // namespace dqt
