#pragma once
// One optimizer step: forward and backward over the micro-batches, gradient clipping and the
// update of every weight, either from a whole-model gradient buffer after the backward pass or
// fused into it (optim/fused_update.h). Shared by the training loop and the benchmarks.
#include <cstdint>
#include <functional>
#include <optional>

#include "model/gradient_sink.h"
#include "model/llama.h"
#include "optim/fused_update.h"
#include "optim/optimizer.h"

namespace dqt {

class TrainingStep {
public:
    TrainingStep(ModelParameters& model, OptimizerState& state, const AdamWConfig& adam, float grad_clip,
                 bool fused_update, uint64_t seed);

    struct Result {
        double loss_sum = 0.0;   // summed cross-entropy over every token of the step, nats
        double grad_norm = 0.0;  // global norm of the step's gradients before clipping
    };
    // fill(micro) puts micro-batch `micro`'s tokens and targets into acts. grad_scale is
    // 1 / tokens of the whole step; t is the 1-based step.
    Result run(Activations& acts, int micro_batches, float grad_scale, float lr, int64_t t,
               const std::function<void(int micro)>& fill);

    // The last step's gradient norm: fused updates clip with it, so a resumed run restores it.
    double previous_grad_norm = 0.0;

private:
    ModelParameters& model_;
    OptimizerState& state_;
    AdamWConfig adam_;
    float grad_clip_;
    uint64_t seed_;
    std::optional<GradientBuffer> gradients_;  // unfused only
    std::optional<FusedUpdater> fused_;        // fused only
};

}  // namespace dqt
