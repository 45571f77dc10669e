#pragma once
// One optimizer step: forward and backward over the micro-batches, gradient clipping and the
// update of every weight, either from the step's gradient after the backward pass or fused
// into it (optim/fused_update.h). Shared by the training loop and the benchmarks.
//
// An unfused step sums the gradients of its micro-batches in a fixed pairwise order
// (model/gradient_accumulator.h), then clips and updates every weight. On one process that is
// all: no transfer code runs. Under mpirun the step is built with its ranks' group and hands
// the finished micro-batches to a DataParallelStep (train/data_parallel_step.h), which
// exchanges the gradients and updates this rank's shard with the same bits as one process.
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>

#include "model/gradient_accumulator.h"
#include "model/llama.h"
#include "optim/fused_update.h"
#include "optim/optimizer.h"

namespace dqt {

class Communicator;
struct CommCompression;
struct ShardPlan;
class DataParallelStep;

// The ranks a step is shared by under mpirun: the plan cut for comm.size() ranks.
struct StepGroup {
    Communicator& comm;
    const ShardPlan& plan;
    const CommCompression& compression;
};

class TrainingStep {
public:
    // micro_batches M per step (fused updates take one), all on this process, or with a group
    // of several ranks M / ranks on each (M a multiple of the rank count; state then holds
    // this rank's share of the plan).
    TrainingStep(ModelParameters& model, OptimizerState& state, const AdamWConfig& adam, float grad_clip,
                 bool fused_update, uint64_t seed, int micro_batches, const StepGroup* group = nullptr);
    ~TrainingStep();

    struct Result {
        double loss_sum = 0.0;        // summed cross-entropy over every token of the step (all ranks), nats
        double grad_norm = 0.0;       // global norm of the step's gradients before clipping
        int64_t gradient_bytes = 0;   // data-parallel: sent by this rank in the reduce-scatter
        int64_t weight_bytes = 0;     // data-parallel: sent by this rank in the all-gather of new weights
        int64_t other_bytes = 0;      // data-parallel: losses and norm partial sums
        double exchange_wait_seconds = 0.0;  // data-parallel: waiting for gradients after the backward pass
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

    // What compressed transfers carry from step to step (DataParallelStep; null on one process).
    Array<float>* gradient_residual();
    Array<float>* weight_master();

private:
    Result run_fused(Activations& acts, float grad_scale, float lr, int64_t t, const std::function<void(int)>& fill);
    // Gradients into the accumulator, then the update (or, on several ranks, the exchange).
    Result run_unfused(Activations& acts, float grad_scale, float lr, int64_t t, const std::function<void(int)>& fill);

    ModelParameters& model_;
    OptimizerState& state_;
    AdamWConfig adam_;
    float grad_clip_;
    uint64_t seed_;
    int first_micro_ = 0;  // of this process's micro-batches, in the step's global order
    int leaves_;           // micro-batches this process runs
    std::optional<GradientAccumulator> accumulator_;   // unfused only
    std::optional<FusedUpdater> fused_;                // fused only
    std::unique_ptr<DataParallelStep> data_parallel_;  // unfused on more than one rank
};

}  // namespace dqt
