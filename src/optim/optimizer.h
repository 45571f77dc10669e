#pragma once
// One optimizer step: each tensor updated as its storage asks (fp32 AdamW, or the DQT update
// of integer codes), from a whole-model gradient buffer or piece by piece (fused_update.h).
#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "core/exact_sum.h"
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
    // A learned DQT scale's gradient sum over the ranges applied here (zero otherwise).
    ExactSum code_gradient_dot() const { return code_gradient_dot_; }
    // whole_tensor_dot: code_gradient_dot() summed over every rank that applied a range.
    void finish(ExactSum whole_tensor_dot);

private:
    float* values_;  // fp32 tensors
    TensorMoments& moments_;
    std::optional<AdamWStep> adamw_;
    std::optional<DqtStep> dqt_;
    ExactSum code_gradient_dot_ = 0;
};

// Sums each tensor's code_gradient_dot() over the data-parallel ranks, in place (one entry
// per tensor of the layout). Absent on one rank.
using SumOverRanks = std::function<void(std::vector<ExactSum>& per_tensor)>;

// t is the 1-based step (bias correction and, with seed, the key of the rounding noise).
// The step of the elements at flat gradient positions [begin, end) only (a data-parallel
// shard: data_parallel/shard_plan.h); gradients (end - begin) starts at position begin and state holds
// at least those elements' moments. Every dqt tensor still gets its new scale: it follows from
// the pre-update codes, which every rank holds; a learned one from the dot of every rank,
// which sum_over_ranks combines.
void optimizer_step_range(ModelParameters& model, const float* gradients, size_t begin, size_t end,
                          OptimizerState& state, const AdamWConfig& config, float lr, int64_t t, uint64_t seed,
                          const SumOverRanks& sum_over_ranks = {});

// The clipping factor for a norm: clip / norm when norm exceeds clip (clip > 0), else 1.
float clip_factor(double norm, float clip);
// gradients (count), whose norm is `norm`, scaled by clip_factor(norm, clip).
void clip_gradients(float* gradients, size_t count, double norm, float clip);

}  // namespace dqt
