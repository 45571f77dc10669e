#pragma once
// Ternary inference (`dqt eval` / `dqt generate`): every linear whose forward reads ternary
// weights is packed once for the ternary x int8 kernels (kernels/ternary_matmul.h), and
// weight_linear_forward then runs on them instead of a dense fp32 copy:
//   bitnet:           q = the absmean ternarization of the latent weights, gamma = mean|W|;
//   dqt at 1.58 bits: q = the stored codes, gamma = 1 / scale;
//   dqt at n bits:    only after convert_to_ternary (model/ternary_convert.h).
// The result is the function training computes (8-bit absmax activations, ternary weights),
// summed exactly in integers.
#include "model/parameters.h"

namespace dqt {

// Fills model.ternary_packed; returns the number of tensors packed (0 for fp and n-bit dqt).
int pack_ternary_weights(ModelParameters& model);

}  // namespace dqt
