#pragma once
// Ternary inference of a model trained otherwise (the paper's claim 4): every weight the
// method quantizes is re-snapped to ternary codes with its own absmean,
//   gamma = mean|W|, q = clip(round(W / (gamma + eps)), -1, 1), W_ternary = q * gamma
// (BitNet's quantizer),
// where W is the stored weight (dqt: q / s at any bit width; bitnet: the latent weights, so
// the result computes exactly bitnet's forward). fp32 tensors are copied unchanged.
#include <memory>

#include "model/parameters.h"

namespace dqt {

// dqt::Error for an fp model (it has no quantized weights to convert).
std::unique_ptr<ModelParameters> convert_to_ternary(const ModelParameters& model);

}  // namespace dqt
