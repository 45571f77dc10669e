#pragma once
// `dqt train --device cuda`: train/device_step.h's step on the GPU, over cuda/training_pass.h.
#include <cstddef>

#include "model/parameters.h"
#include "optim/optimizer_state.h"
#include "train/options.h"

namespace dqt::cuda {

// What the GPU step allocates before its first kernel, by category (the ledger's blocks). Each
// op's transient scratch (int8 rows, bf16 operands, a dense weight for an input gradient) comes
// on top, so the sum is a lower bound of the step's peak.
struct DeviceMemoryPlan {
    size_t weights = 0, optimizer = 0, gradients = 0, activations = 0;
    size_t total() const { return weights + optimizer + gradients + activations; }
};
DeviceMemoryPlan plan_device_memory(const ModelParameters& model, const OptimizerState& state,
                                    const TrainOptions& options);
// dqt::Error ("needs at least 41.2 GiB of GPU memory ... : use a smaller --batch") when the plan
// does not fit in the device's free memory; called before the step allocates anything.
void check_device_memory_plan(const DeviceMemoryPlan& plan);

// Makes `--device cuda` build this backend's step (called once at start-up by the app).
void register_training_device();

}  // namespace dqt::cuda
