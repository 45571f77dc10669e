#pragma once
// One optimizer step: forward and backward over the micro-batches, gradient clipping and the
// update of every weight, either from the step's gradient after the backward pass or fused
// into it (optim/fused_update.h). Shared by the training loop and the benchmarks.
//
// An unfused step accumulates the gradients of its micro-batches in a fixed pairwise order
// (model/gradient_accumulator.h); on one process it then clips and updates every weight, and
// calls no transfer code. Under mpirun it runs data-parallel over the ranks of `comm`: rank r
// runs micro-batches [r * k, (r + 1) * k) of the step's M = N * k, the gradients are
// reduce-scattered in the same order (data_parallel/gradient_exchange.h), each rank updates the
// elements it owns (data_parallel/shard_plan.h) and all-gathers the new weights: integer codes
// for dqt tensors, fp32 for the rest, the same bits as one process. `compression` sends the
// gradients, or the new fp32 values as differences, block-quantized (data_parallel/compression.h).
#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "data_parallel/comm.h"
#include "data_parallel/compressed_weight_gather.h"
#include "data_parallel/compression.h"
#include "data_parallel/gradient_exchange.h"
#include "data_parallel/shard_plan.h"
#include "model/llama.h"
#include "optim/fused_update.h"
#include "optim/optimizer.h"

namespace dqt {

class TrainingStep {
public:
    // micro_batches: M, a multiple of comm.size(); plan: cut for comm.size() ranks, and state
    // holding this rank's share of it. Fused updates take one rank and one micro-batch.
    TrainingStep(ModelParameters& model, OptimizerState& state, const AdamWConfig& adam, float grad_clip,
                 bool fused_update, uint64_t seed, int micro_batches, Communicator& comm, const ShardPlan& plan,
                 CommCompression compression = {});

    struct Result {
        double loss_sum = 0.0;        // summed cross-entropy over every token of the step (all ranks), nats
        double grad_norm = 0.0;       // global norm of the step's gradients before clipping
        int64_t gradient_bytes = 0;   // sent by this rank in the reduce-scatter
        int64_t weight_bytes = 0;     // sent by this rank in the all-gather of new weights
        int64_t other_bytes = 0;      // losses and norm partial sums
        double exchange_wait_seconds = 0.0;  // waiting for gradients after the backward pass
        bool skipped = false;         // not applied: its loss or gradient norm was not finite
    };
    // With skip_nonfinite, an unfused step whose loss or gradient norm is not finite changes no
    // weight and no optimizer state (every rank sees the same sums, so all skip together).
    // Fused steps update inside the backward pass and cannot be skipped.
    bool skip_nonfinite = false;
    // fill(micro) puts micro-batch `micro` (0 .. M-1, global) into acts. grad_scale is
    // 1 / tokens of the whole step; t is the 1-based step.
    Result run(Activations& acts, float grad_scale, float lr, int64_t t, const std::function<void(int micro)>& fill);

    // The last step's gradient norm: fused updates clip with it, so a resumed run restores it.
    double previous_grad_norm = 0.0;

    // What compressed transfers carry from step to step (null when not compressed, or one rank):
    // this rank's gradient residual (GradientExchange::residual) and its exact weight shard
    // (CompressedWeightGather::master). A resumed run restores them.
    Array<float>* gradient_residual();
    Array<float>* weight_master();

private:
    Result run_fused(Activations& acts, float grad_scale, float lr, int64_t t, const std::function<void(int)>& fill);
    // Gradients into the accumulator (and, on several ranks, the exchange), then the optimizer.
    Result run_unfused(Activations& acts, float grad_scale, float lr, int64_t t, const std::function<void(int)>& fill);

    ModelParameters& model_;
    OptimizerState& state_;
    AdamWConfig adam_;
    float grad_clip_;
    uint64_t seed_;
    int micro_batches_;
    Communicator& comm_;
    const ShardPlan& plan_;
    std::optional<GradientAccumulator> accumulator_;  // unfused only
    std::optional<GradientExchange> exchange_;        // unfused on more than one rank
    std::optional<FusedUpdater> fused_;         // fused only
    std::optional<CompressedWeightGather> weight_gather_;  // with compressed weights on > 1 rank
};

}  // namespace dqt
