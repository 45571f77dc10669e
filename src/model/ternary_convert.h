#pragma once
// Ternary inference of a model trained otherwise (the paper's claim 4): every weight the
// method quantizes is re-snapped to ternary codes q in {-1, 0, 1} with a per-tensor scale,
// W_ternary = q * alpha, by one of two rules on the stored weight W (dqt: q / s at any bit
// width; bitnet: the latent weights):
//   absmean (BitNet's quantizer): alpha = gamma = mean|W|, q = clip(round(W / (gamma + eps)), -1, 1);
//       for bitnet this is exactly its own forward;
//   twn (Ternary Weight Networks, Li et al. 2016): threshold 0.7 mean|W|, q = sign(W) above it,
//       alpha = the mean |W| above it. An 8-bit DQT model's weights fill +-mean|W0| almost
//       uniformly (the reference scale rule), where absmean's alpha is too small: on the
//       reproduction's 8-bit model absmean costs +15% loss, twn +0.2% (docs/results.md).
// fp32 tensors are copied unchanged.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "model/parameters.h"

namespace dqt {

enum class TernaryRule { absmean, twn };
const char* ternary_rule_name(TernaryRule rule);
// "absmean" or "twn"; dqt::Error naming both otherwise.
TernaryRule parse_ternary_rule(const std::string& name);

// codes (count, packed ternary) = w (count) snapped to {-1, 0, 1} by `rule`; returns the
// scale s of W = q / s.
float ternarize_onto_codes(uint8_t* codes, const float* w, size_t count, TernaryRule rule);

// dqt::Error for an fp model (it has no quantized weights to convert).
std::unique_ptr<ModelParameters> convert_to_ternary(const ModelParameters& model,
                                                    TernaryRule rule = TernaryRule::absmean);

}  // namespace dqt
