#pragma once
// Fused backward and update: the optimizer updates each piece of a parameter as soon as the
// backward pass has completed its gradient, then frees it. No gradient buffer for the whole
// model ever exists: the largest gradient alive is one piece, at most the size of the largest
// block linear (model/gradient_sink.h). Needs one micro-batch per step (accumulating over
// micro-batches needs the whole gradient until the last one).
//
// A tied table (the head reads token_embd) gets its gradient in two passes of one backward: the
// head's first, the lookup's last. It is the one gradient held whole, (V, C), from the head's
// pass until the lookup's pass releases its pieces, each updated as it is released.
//
// Clipping: the step's global gradient norm is known only after its last update, so the
// clipping factor of step t comes from the norm of step t - 1: gradients are multiplied by
// min(1, clip / previous_norm). The first step is not clipped (its learning rate is the
// smallest of the warm-up anyway).
#include <cstdint>
#include <optional>

#include "core/memory.h"
#include "model/gradient_sink.h"
#include "optim/optimizer.h"

namespace dqt {

class FusedUpdater : public GradientSink {
public:
    FusedUpdater(ModelParameters& model, OptimizerState& state, const AdamWConfig& config, uint64_t seed);

    // Before each backward pass: the learning rate, the 1-based step, and the factor every
    // gradient is multiplied by before its update (clipping).
    void begin_step(float lr, int64_t t, float gradient_factor);
    float* acquire(const ParamTensor& tensor, int row_begin, int row_end) override;
    void release(const ParamTensor& tensor, int row_begin, int row_end) override;
    // Bytes of gradient a fused step holds beyond one piece: the tied table's, else 0.
    static size_t tied_gradient_bytes(const ModelConfig& config);
    // L2 norm of this step's gradients before the factor, summed piece by piece in backward order.
    double gradient_norm() const;

private:
    ModelParameters& model_;
    OptimizerState& state_;
    AdamWConfig config_;
    uint64_t seed_;
    float lr_ = 0.0f;
    int64_t t_ = 0;
    float factor_ = 1.0f;
    double sum_squares_ = 0.0;
    bool is_tied_table(const ParamTensor& tensor) const;

    Array<float> piece_;                  // (rows of the piece, cols) category gradients
    Array<float> tied_gradient_;          // (V, C) the tied table's gradient while its two passes run
    bool tied_head_pass_done_ = false;    // the head's pass over the tied table has been released
    std::optional<TensorUpdate> update_;  // the tensor whose pieces are being updated
};

}  // namespace dqt
