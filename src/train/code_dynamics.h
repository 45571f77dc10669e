#pragma once
// How the codes of the quantized weights move during training, for the question of why ternary
// DQT trails BitNet (docs/results.md, "Ternary DQT against BitNet"): at a measured step, per
// quantized linear, the fraction of codes that changed in that one step and since the previous
// measurement, the fraction at zero, and the size of a grid step in weight units. For dqt the
// codes are the stored ones; for bitnet the absmean ternary codes of its latent weights (what
// its forward multiplies), so both methods are measured on the same footing.
//
// Each snapshot is one int8 per quantized weight (two are held): a diagnostic, enabled by
// --code-stats-every, not part of the method's memory.
#include <cstdint>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "model/parameters.h"

namespace dqt {

class CodeDynamics {
public:
    // every: steps between measurements (> 0).
    CodeDynamics(const ModelParameters& model, int every);

    // Called after each optimizer step with its 1-based number: the step before a measurement
    // takes a snapshot; a measured step returns true and fills `record` (type "codes").
    bool after_step(const ModelParameters& model, int step, nlohmann::json& record);

private:
    struct Snapshot {
        int step = -1;
        std::vector<std::vector<int8_t>> codes;  // per quantized linear, (rows, cols)
        std::vector<float> grid_steps;           // per quantized linear: its weight_scale (model/weight_format.h)
    };
    void take(const ModelParameters& model, int step, Snapshot& into) const;

    int every_;
    std::vector<const ParamTensor*> linears_;  // the quantized ones, in layout order
    Snapshot previous_step_;                   // the step before the measured one
    Snapshot last_measured_;                   // the previous measurement (or the start)
};

}  // namespace dqt
