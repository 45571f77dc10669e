#include "train/code_dynamics.h"

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "model/weight_access.h"

namespace dqt {

namespace {

double fraction_changed(const std::vector<int8_t>& before, const std::vector<int8_t>& after) {
    size_t changed = 0;
    for (size_t i = 0; i < after.size(); ++i) changed += before[i] != after[i];
    return after.empty() ? 0.0 : static_cast<double>(changed) / static_cast<double>(after.size());
}

double fraction_zero(const std::vector<int8_t>& codes) {
    size_t zeros = 0;
    for (int8_t q : codes) zeros += q == 0;
    return codes.empty() ? 0.0 : static_cast<double>(zeros) / static_cast<double>(codes.size());
}

}  // namespace

CodeDynamics::CodeDynamics(const ModelParameters& model, int every) : every_(every) {
    require(every > 0, "--code-stats-every must be positive, got " + std::to_string(every));
    for (const ParamTensor& tensor : model.layout.tensors)
        if (tensor.quantized()) linears_.push_back(&tensor);
    require(!linears_.empty(), "--code-stats-every measures quantized weights, and a " + model.method.label() +
                                   " model has none (use --method bitnet or dqt)");
    take(model, 0, last_measured_);
}

void CodeDynamics::take(const ModelParameters& model, int step, Snapshot& into) const {
    into.step = step;
    into.codes.resize(linears_.size());
    into.grid_steps.resize(linears_.size());
    for (size_t i = 0; i < linears_.size(); ++i) {
        const ParamTensor& weight = *linears_[i];
        into.codes[i].resize(weight.count());
        into.grid_steps[i] = weight.traits().weight_scale(model.stored(weight), weight);
        weight.traits().read_integers(model.stored(weight), weight, into.grid_steps[i], 0, weight.count(),
                                      into.codes[i].data());
    }
}

bool CodeDynamics::after_step(const ModelParameters& model, int step, nlohmann::json& record) {
    if ((step + 1) % every_ == 0) take(model, step, previous_step_);
    if (step % every_ != 0 || previous_step_.step != step - 1) return false;
    Snapshot now;
    take(model, step, now);
    nlohmann::json tensors = nlohmann::json::array();
    double moved_in_step = 0.0, moved_since = 0.0, zeros = 0.0, weights = 0.0;
    for (size_t i = 0; i < linears_.size(); ++i) {
        const ParamTensor& weight = *linears_[i];
        const double in_step = fraction_changed(previous_step_.codes[i], now.codes[i]);
        const double since = fraction_changed(last_measured_.codes[i], now.codes[i]);
        const double zero = fraction_zero(now.codes[i]);
        tensors.push_back({{"name", weight.name}, {"changed_in_step", in_step}, {"changed_since", since},
                           {"zero", zero}, {"grid_step", now.grid_steps[i]}});
        const double n = static_cast<double>(weight.count());
        moved_in_step += in_step * n;
        moved_since += since * n;
        zeros += zero * n;
        weights += n;
    }
    record = {{"type", "codes"},
              {"step", step},
              {"since_step", last_measured_.step},
              {"changed_in_step", moved_in_step / weights},
              {"changed_since", moved_since / weights},
              {"zero", zeros / weights},
              {"tensors", tensors}};
    last_measured_ = std::move(now);
    return true;
}

}  // namespace dqt
