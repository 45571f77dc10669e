#pragma once
// A training step that runs on an accelerator (`dqt train --device cuda`). The weights and the
// optimizer state live on the device between steps; the loop hands the step each micro-batch's
// tokens, and pulls the state back into TrainingState's model and optimizer before it evaluates
// or saves, so checkpoints keep the CPU's format and a run resumes on either device.
//
// train/ knows no backend: a build with one registers its factory at start-up (app/, under
// DQT_WITH_CUDA), and without one `--device cuda` is a one-line error.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "model/parameters.h"
#include "optim/optimizer_state.h"
#include "train/options.h"
#include "train/training_step.h"

namespace dqt {

class DeviceStep {
public:
    virtual ~DeviceStep() = default;
    // Fills micro-batch `micro` (0 .. M-1): tokens and targets, (B, T) each, host memory.
    using Fill = std::function<void(int micro, int32_t* tokens, int32_t* targets)>;
    // One optimizer step over options.grad_accum micro-batches, as TrainingStep::run: grad_scale
    // 1 / tokens of the step, t the 1-based step. Clips, and skips a non-finite step when
    // skip_nonfinite, as the CPU step does.
    virtual TrainingStep::Result run(float grad_scale, float lr, int64_t t, const Fill& fill) = 0;
    // The device's weights and optimizer state into the host's.
    virtual void copy_to_host(ModelParameters& model, OptimizerState& state) = 0;
    // The device's memory (the run's memory report): {"device": name, "peak_bytes": {category:
    // bytes}, "driver_used_bytes", "driver_total_bytes"}.
    virtual nlohmann::json memory_json() const = 0;
    bool skip_nonfinite = false;
};

// memory_json() as the lines of the memory report.
std::string device_memory_text(const nlohmann::json& memory);

// model and state: the run's, already built or resumed; the step copies them to the device.
using DeviceStepFactory =
    std::function<std::unique_ptr<DeviceStep>(const ModelParameters& model, const OptimizerState& state,
                                              const TrainOptions& options)>;
void set_cuda_step_factory(DeviceStepFactory factory);
// The registered backend's step; dqt::Error saying how to get one when this build has none.
std::unique_ptr<DeviceStep> make_cuda_step(const ModelParameters& model, const OptimizerState& state,
                                           const TrainOptions& options);

}  // namespace dqt
