#pragma once
// The DQT update (docs/METHOD.md section 2) of one integer-coded tensor, W = q / scale, with no fp32
// copy of W at any time: element by element, W is read from its code, moved by Adam and
// decoupled decay, and rounded back onto the grid.
//   m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2
//   W'  = W - lr * sqrt(1 - b2^t) / (1 - b1^t) * m / (sqrt(v) + eps)
//   W'' = W' - lr * wd * W'
//   q   = round(clip(W'' * s, qn, qp)), stochastic (u from rounding_uniforms) or nearest,
// where s is the rounding scale: under ScaleRule::reference, qp / max(W) of the pre-update
// tensor (the reference code's rule: it stays at its initial value while some code sits at qp);
// under ScaleRule::learned, the old scale, after which the grid step d = 1 / s takes its own
// Adam step on log d (same lr, betas, eps and bias correction; no decay) from
// dL/dlog d = d * sum_i g_i q_i (optim/scale_gradient.h).
// With sub-grid residuals (DqtRounding::residual_bits = b > 0, R = 2^b): W = (q + r / R) / s,
// and the rounding is onto the grid R times finer, x R -> y, then q = the code nearest y / R
// (ties up) and r = y - q R in [-R/2, R/2). The forward reads q only; r lives in the moments.
// With an overhang H (DqtRounding::residual_overhang), the clip is to [qn - H, qp + H] and q is
// then clipped to [qn, qp], so r reaches H R at the outer codes.
#include <cstddef>
#include <cstdint>

#include "core/exact_sum.h"
#include "model/method.h"
#include "optim/adamw.h"
#include "optim/update_elements.h"
#include "optim/optimizer_state.h"
#include "quant/codes.h"
#include "quant/rounding.h"

namespace dqt {

struct CodedTensor {
    uint8_t* codes;  // code_bytes(grid, count)
    float* scale;    // updated in place
    size_t count;
    CodeGrid grid;
    int tensor_id;   // keys the rounding noise
};

struct DqtRounding {
    Rounding mode = Rounding::stochastic;
    uint64_t seed = 0;
    ScaleRule scale_rule = ScaleRule::reference;
    int residual_bits = 0;  // > 0: the moments hold sub-grid residuals (model/method.h)
    int residual_overhang = 0;  // with residuals: grid steps the position may run past the outer codes
};

// One DQT step of a coded tensor, applied to element ranges (each once, any order) and then
// finished. The constructor reads the pre-update tensor (its top code sets the reference
// rule's scale); finish() stores the new scale. t is the 1-based step.
class DqtStep {
public:
    DqtStep(const CodedTensor& tensor, const AdamWConfig& config, float lr, int64_t t, const DqtRounding& rounding);
    // Elements [first, last), first a multiple of 4; g points at element first; moments of any storage.
    // Under the learned rule, code_gradient_dot (if given) gains sum g_i q_i over the range, at
    // the old codes: the same bits as code_gradient_dot() of optim/scale_gradient.h.
    void apply(const float* g, TensorMoments& moments, size_t first, size_t last,
               ExactSum* code_gradient_dot = nullptr) const;
    // code_gradient_dot: sum_i g_i q_i over the whole tensor with the pre-update codes (used by
    // the learned rule, which also updates moments.scale_moments).
    void finish(TensorMoments& moments, double code_gradient_dot) const;

    const DqtStepConstants& constants() const { return k_; }

private:
    CodedTensor tensor_;
    DqtStepConstants k_;
};

// The constants of one step of a tensor whose pre-update scale is old_scale and top code
// top_code (read only under the reference rule). DqtStep and the GPU's step (src/cuda/) both
// start here.
DqtStepConstants dqt_step_constants(const CodeGrid& grid, float old_scale, int top_code, const AdamWConfig& config,
                                    float lr, int64_t t, const DqtRounding& rounding, int tensor_id);

// The learned rule's new scale after the step k, from the tensor's sum_i g_i q_i at the old
// codes; updates scale_moments ({m, v} of the log grid step).
float learned_scale_after_step(const DqtStepConstants& k, float* scale_moments, double code_gradient_dot);

// A run with sub-grid residuals starts from where its weights really are, not from grid
// points: the codes stay as the run's start set them (the initial draw rounded to nearest, or
// the --init-from model's conversion), and each weight's residual is its real value's offset
// from its code on the fine grid, r = round((w s - q) R), clipped to the code's cell ([-R/2,
// R/2), or to H R past an outer code). w holds the real values of elements [first, first +
// count) (this rank's share), residuals receives theirs. R = 2^residual_bits, H = residual_overhang.
void start_residuals(const float* w, size_t count, float scale, const CodeGrid& grid, int residual_bits,
                     int residual_overhang, const uint8_t* codes, size_t first, int8_t* residuals);

// Float64 reference of the same update: q holds codes as integers; u[i] is element i's
// uniform (ignored for nearest); scale_m, scale_v the learned rule's moments; r the sub-grid
// residuals when residual_bits > 0, residual_overhang as DqtRounding's. Returns the new scale.
double dqt_update_reference(int* q, double scale, double* m, double* v, const double* g, const float* u,
                            size_t count, const CodeGrid& grid, const AdamWConfig& config, double lr, int64_t t,
                            Rounding mode, ScaleRule scale_rule, double& scale_m, double& scale_v,
                            int* r = nullptr, int residual_bits = 0, int residual_overhang = 0);

}  // namespace dqt
