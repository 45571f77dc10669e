#include "train/device_step.h"

#include <cstdio>

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace dqt {

namespace {

DeviceStepFactory& cuda_factory() {
    static DeviceStepFactory factory;
    return factory;
}

}  // namespace

void set_cuda_step_factory(DeviceStepFactory factory) { cuda_factory() = std::move(factory); }

std::string device_memory_text(const nlohmann::json& memory) {
    std::string text = "GPU " + memory.at("device").get<std::string>() + ", peak by category:";
    for (const auto& [category, bytes] : memory.at("peak_bytes").items()) {
        char part[80];
        std::snprintf(part, sizeof part, " %s %.1f MiB", category.c_str(), bytes.get<double>() / 1048576.0);
        text += part;
    }
    char driver[120];
    std::snprintf(driver, sizeof driver, "\nGPU driver: %.0f of %.0f MiB in use (with the CUDA context and cached blocks)\n",
                  memory.at("driver_used_bytes").get<double>() / 1048576.0,
                  memory.at("driver_total_bytes").get<double>() / 1048576.0);
    return text + driver;
}

std::unique_ptr<DeviceStep> make_cuda_step(const ModelParameters& model, const OptimizerState& state,
                                           const TrainOptions& options) {
    if (!cuda_factory()) {
        throw Error("this dqt was built without CUDA: rebuild it with cmake -DDQT_CUDA=ON (docs/cuda.md), or train "
                    "with --device cpu");
    }
    return cuda_factory()(model, state, options);
}

}  // namespace dqt
