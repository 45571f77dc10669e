#pragma once
// One optimizer step: each tensor updated as its storage asks (fp32 AdamW, or the DQT update
// of integer codes), from a whole-model gradient buffer or piece by piece (fused_update.h).
#include <cstdint>
#include <optional>

#include "model/gradient_sink.h"
#include "model/parameters.h"
#include "optim/adamw.h"
#include "optim/dqt_update.h"
#include "optim/optimizer_state.h"

namespace dqt {

// The step of one tensor: apply() to element ranges (each once; first a multiple of
// kStateBlock), then finish().
class TensorUpdate {
public:
    TensorUpdate(ModelParameters& model, const ParamTensor& tensor, OptimizerState& state, const AdamWConfig& config,
                 float lr, int64_t t, uint64_t seed);
    // g (last - first): the gradient of elements [first, last).
    void apply(const float* g, size_t first, size_t last);
    void finish();

private:
    float* values_;  // fp32 tensors
    TensorMoments& moments_;
    std::optional<AdamWStep> adamw_;
    std::optional<DqtStep> dqt_;
};

// t is the 1-based step (bias correction and, with seed, the key of the rounding noise).
void optimizer_step(ModelParameters& model, const GradientBuffer& gradients, OptimizerState& state,
                    const AdamWConfig& config, float lr, int64_t t, uint64_t seed);

// The step of the elements at flat gradient positions [begin, end) only (a data-parallel
// shard: dist/shard_plan.h); gradients (end - begin) starts at position begin and state holds
// at least those elements' moments. Every dqt tensor still gets its new scale: it follows from
// the pre-update codes, which every rank holds.
void optimizer_step_range(ModelParameters& model, const float* gradients, size_t begin, size_t end,
                          OptimizerState& state, const AdamWConfig& config, float lr, int64_t t, uint64_t seed);

}  // namespace dqt
