#pragma once
// A new model's weights, drawn from the run's seed: the same bits for any thread or rank count.
#include <cstddef>
#include <cstdint>

#include "model/parameters.h"

namespace dqt {

// Matrices N(0, init_std) keyed on (seed, tensor id, element), norm gains 1; coded tensors are
// snapped once onto their grid with the absmean scale (docs/METHOD.md section 2).
void initialize_parameters(ModelParameters& model, uint64_t seed);

// Element i of a matrix's initial draw, N(0, init_std) keyed on (seed, tensor id, i): what
// initialize_parameters stores (fp formats) or snaps onto the grid (coded ones).
float initial_draw(const ModelConfig& config, uint64_t seed, const ParamTensor& tensor, size_t i);

}  // namespace dqt
