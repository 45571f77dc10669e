#pragma once
// The data-parallel half of a training step under mpirun (train/training_step.h). Rank r runs
// micro-batches [r * k, (r + 1) * k) of the step's M = N * k; their gradients are
// reduce-scattered in the pairwise order one process sums them in
// (data_parallel/gradient_exchange.h), each rank updates the elements it owns
// (data_parallel/shard_plan.h) and all-gathers the new weights: integer codes for dqt tensors,
// fp32 for the rest, the same bits as one process. `compression` sends the gradients, or the
// new fp32 values as differences, block-quantized (data_parallel/compression.h).
#include <cstdint>
#include <optional>
#include <vector>

#include "data_parallel/comm.h"
#include "data_parallel/compressed_weight_gather.h"
#include "data_parallel/compression.h"
#include "data_parallel/gradient_exchange.h"
#include "data_parallel/shard_plan.h"
#include "train/training_step.h"

namespace dqt {

class DataParallelStep {
public:
    // Listens to `accumulator` (this rank's `leaves` micro-batches) on more than one rank.
    DataParallelStep(ModelParameters& model, OptimizerState& state, const AdamWConfig& adam, float grad_clip,
                     uint64_t seed, GradientAccumulator& accumulator, int leaves, Communicator& comm,
                     const ShardPlan& plan, const CommCompression& compression);

    // Before the step's first micro-batch.
    void begin_step();
    // After this rank's micro-batches, `losses` theirs in order: the step's loss and gradient
    // norm over every rank, then (unless skip_nonfinite finds them not finite) the clipped
    // update of this rank's shard and the all-gather of the new weights.
    TrainingStep::Result finish(const std::vector<double>& losses, float lr, int64_t t, bool skip_nonfinite);

    // What compressed transfers carry from step to step (null when not compressed): this
    // rank's gradient residual (GradientExchange::residual) and its exact weight shard
    // (CompressedWeightGather::master). A resumed run restores them.
    Array<float>* gradient_residual();
    Array<float>* weight_master();

private:
    ModelParameters& model_;
    OptimizerState& state_;
    AdamWConfig adam_;
    float grad_clip_;
    uint64_t seed_;
    int leaves_;
    Communicator& comm_;
    const ShardPlan& plan_;
    GradientExchange exchange_;
    std::optional<CompressedWeightGather> weight_gather_;  // with compressed weights
};

}  // namespace dqt
