#include "cuda/training_device.h"

#include <cmath>
#include <cstdio>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "cuda/device.h"
#include "cuda/device_memory.h"
#include "cuda/kernels.h"
#include "cuda/training_pass.h"
#include "optim/fused_update.h"
#include "train/device_step.h"

namespace dqt::cuda {

DeviceMemoryPlan plan_device_memory(const ModelParameters& model, const OptimizerState& state,
                                    const TrainOptions& options) {
    DeviceMemoryPlan plan;
    plan.weights = device_block_bytes(model.values.size() * sizeof(float)) + device_block_bytes(model.codes.size()) +
                   device_block_bytes(model.scales.size() * sizeof(float));
    for (const ParamTensor& tensor : model.layout.tensors) {  // as DeviceMoments copies them
        const TensorMoments& moments = state.of(tensor);
        plan.optimizer += 2 * device_block_bytes(moments.count * moments.element_bytes());
        if (moments.dtype == StateDtype::q8) plan.optimizer += 2 * device_block_bytes(moments.m_absmax.size() * sizeof(float));
        plan.optimizer += device_block_bytes(moments.residual.size());
    }
    plan.gradients = device_block_bytes(model.layout.total * sizeof(float));
    plan.activations =
        DeviceActivations::planned_bytes(options.model, options.batch, options.model.seq_len, options.recompute);
    return plan;
}

void check_device_memory_plan(const DeviceMemoryPlan& plan) {
    const DriverMemory driver = driver_memory();
    const size_t free = driver.total - driver.used;
    if (plan.total() <= free) return;
    constexpr double GiB = 1024.0 * 1024.0 * 1024.0;
    char message[400];
    std::snprintf(message, sizeof message,
                  "training needs at least %.1f GiB of GPU memory (weights %.1f, optimizer %.1f, gradients %.1f, "
                  "activations %.1f), and the GPU has %.1f GiB free: use a smaller --batch or --seq-len",
                  plan.total() / GiB, plan.weights / GiB, plan.optimizer / GiB, plan.gradients / GiB,
                  plan.activations / GiB, free / GiB);
    throw Error(message);
}

namespace {

// One optimizer step as TrainingStep's unfused one: the micro-batches' gradients summed into
// one device buffer, the global norm, clipping, the update of every tensor.
class CudaTrainingStep : public DeviceStep {
public:
    CudaTrainingStep(DeviceInfo info, const ModelParameters& model, const OptimizerState& state,
                     const TrainOptions& options)
        : info_(std::move(info)),
          options_(options),
          model_(model),
          optimizer_(state, model.layout),
          acts_(options.model, options.batch, options.model.seq_len, options.recompute),
          pass_(model_),
          gradients_(MemCategory::gradients, model.layout.total),
          norm_scratch_(MemCategory::scratch, sum_of_squares_scratch_doubles(model.layout.total)),
          tokens_(static_cast<size_t>(options.batch) * options.model.seq_len),
          targets_(tokens_.size()) {}

    TrainingStep::Result run(float grad_scale, float lr, int64_t t, const Fill& fill) override {
        TrainingStep::Result result;
        gradients_.zero();
        for (int micro = 0; micro < options_.grad_accum; ++micro) {
            fill(micro, tokens_.data(), targets_.data());
            result.loss_sum += pass_.forward(acts_, tokens_.data(), targets_.data());
            pass_.backward(acts_, grad_scale, gradients_.data());
        }
        result.grad_norm = std::sqrt(sum_of_squares(gradients_.data(), gradients_.size(), norm_scratch_.data()));
        if (skip_nonfinite && !(std::isfinite(result.loss_sum) && std::isfinite(result.grad_norm))) {
            result.skipped = true;
            return result;
        }
        const float factor = clip_factor(result.grad_norm, options_.grad_clip);
        if (factor != 1.0f) scale_in_place(gradients_.data(), factor, gradients_.size());
        optimizer_.step(model_, gradients_.data(), options_.adam, lr, t, options_.seed);
        return result;
    }

    void copy_to_host(ModelParameters& model, OptimizerState& state) override {
        model_.copy_to(model);
        optimizer_.copy_to(state, model.layout);
    }

    nlohmann::json memory_json() const override {
        nlohmann::json peaks = nlohmann::json::object();
        for (int c = 0; c < kMemCategoryCount; ++c) {
            const auto category = static_cast<MemCategory>(c);
            if (device_peak_bytes(category) > 0) peaks[mem_category_name(category)] = device_peak_bytes(category);
        }
        const DriverMemory driver = driver_memory();
        return {{"device", info_.name},
                {"peak_bytes", peaks},
                {"peak_total_bytes", device_peak_total_bytes()},
                {"driver_used_bytes", driver.used},
                {"driver_total_bytes", driver.total}};
    }

private:
    DeviceInfo info_;
    const TrainOptions& options_;
    DeviceModel model_;
    DeviceOptimizer optimizer_;
    DeviceActivations acts_;
    TrainingPass pass_;
    DeviceArray<float> gradients_;     // (layout.total) the step's gradient, summed over micro-batches
    DeviceArray<double> norm_scratch_;
    std::vector<int32_t> tokens_, targets_;  // (B * T) a micro-batch, host
};

}  // namespace

void register_training_device() {
    set_cuda_step_factory([](const ModelParameters& model, const OptimizerState& state, const TrainOptions& options) {
        DeviceInfo info = require_gpu();  // no GPU: one line
        check_device_memory_plan(plan_device_memory(model, state, options));  // before anything is allocated
        return std::make_unique<CudaTrainingStep>(std::move(info), model, state, options);
    });
}

}  // namespace dqt::cuda
