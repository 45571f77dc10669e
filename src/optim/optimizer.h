#pragma once
// One optimizer step over a whole model: each tensor updated as its storage asks (fp32
// AdamW, or the DQT update of integer codes), plus the gradient-norm helpers of clipping.
#include <cstdint>

#include "model/parameters.h"
#include "optim/adamw.h"
#include "optim/optimizer_state.h"

namespace dqt {

// state laid out like model.gradients; t is the 1-based step (bias correction and the key of
// the rounding noise, with seed).
void optimizer_step(ModelParameters& model, OptimizerState& state, const AdamWConfig& config, float lr, int64_t t,
                    uint64_t seed);

// L2 norm of all gradients, summed in a fixed order (same bits for any thread count).
double gradient_global_norm(const ModelParameters& model);
// Multiplies every gradient by factor.
void scale_gradients(ModelParameters& model, float factor);

}  // namespace dqt
