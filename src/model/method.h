#pragma once
// The training method (docs/METHOD.md section 2): how each weight is stored, how the forward pass
// reads it, and (with optim/) how the optimizer writes it back.
//   fp      fp32 weights.
//   bitnet  fp32 latent weights; the forward reads their absmean ternary projection and
//           quantizes the activations entering the linear to 8 bits (straight-through).
//   dqt     integer codes plus one fp32 scale per tensor, nothing else; the forward reads
//           q / scale and quantizes activations like bitnet; the update rounds stochastically.
// Block linears (q, k, v, o, gate, up, down) always follow the method; the embedding and the
// lm_head only when asked (default: kept fp32, as BitNet keeps the head).
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "quant/codes.h"
#include "quant/rounding.h"

namespace dqt {

enum class Method { fp, bitnet, dqt };
// dqt: how each tensor's scale moves.
//   reference  s = qp / max(W) of the pre-update tensor (the paper's code; a ternary tensor
//              always holds a +1, so its scale never moves from its initial value).
//   learned    the grid step d = 1 / s is a parameter of its own: Adam on log d, with
//              dL/dd = sum_i g_i q_i (optim/scale_gradient.h), at the codes' learning rate.
enum class ScaleRule { reference, learned };
enum class ComputeDtype { fp32, bf16 };

struct MethodConfig {
    Method kind = Method::fp;  // the training method: fp, bitnet or dqt
    CodeGrid grid{1};                          // dqt: code format ("bits"), ternary by default
    Rounding rounding = Rounding::stochastic;  // dqt: how updates return to the grid
    ScaleRule scale_rule = ScaleRule::reference;  // dqt: how the scale moves
    // dqt: bits of each coded weight's sub-grid residual (0: none). The weight's position on a
    // grid 2^residual_bits times finer than its codes' is kept between steps (optimizer state,
    // one int8 a weight), so an update smaller than a grid step accumulates instead of being
    // rounded away or turned into a random flip; the forward still reads only the codes.
    int residual_bits = 0;
    // dqt with residuals: grid steps a weight's fine position may run past the outermost codes
    // (0: clipped at them). A weight pushed beyond +1 stays at code +1 but needs more updates
    // the other way before it flips back: the hysteresis a bitnet latent weight has.
    int residual_overhang = 0;
    bool quantize_embedding = false;
    bool quantize_head = false;
    ComputeDtype compute = ComputeDtype::fp32;  // bf16: GEMM operands rounded to bf16

    // Throws dqt::Error naming an impossible combination.
    void validate() const;
    // "fp", "bitnet", "dqt-1.58", "dqt-8", with "-nearest" for the rounding ablation and
    // "-learned-scale" for the learned scale.
    std::string label() const;
};

const char* method_name(Method method);
Method parse_method(const std::string& name);
ComputeDtype parse_compute_dtype(const std::string& name);
const char* compute_dtype_name(ComputeDtype dtype);
Rounding parse_rounding(const std::string& name);
const char* rounding_name(Rounding rounding);
ScaleRule parse_scale_rule(const std::string& name);
const char* scale_rule_name(ScaleRule rule);

void to_json(nlohmann::json& j, const MethodConfig& config);
void from_json(const nlohmann::json& j, MethodConfig& config);

}  // namespace dqt
