#pragma once
// The quantizers of the training forward on the GPU, each the CPU's arithmetic (src/quant/,
// kernels/int8_rows.h) so that both sides read the same integers:
//   codes -> int8 values and codes -> q / scale (dqt weights);
//   bitnet's absmean projection of fp32 latents (gamma = mean |W|, q = clip(round(W / (gamma
//   + eps)), -1, 1));
//   per-row int8 activations, s = 127 / max(max |x|, 1e-5), a = clip(round(x s)), with x
//   replaced by a / s in place (what the straight-through backward reads);
//   and the integer product's epilogue, out = (a . q) * (weight_scale / s).
#include <cstddef>
#include <cstdint>

#include "quant/codes.h"

namespace dqt::cuda {

// q (count) int8 = the codes' values.
void codes_to_int8(int8_t* q, const uint8_t* codes, size_t count, CodeGrid grid);
// out (count) = q / *scale (scale a device pointer).
void dequantize_codes(float* out, const uint8_t* codes, size_t count, CodeGrid grid, const float* scale);

// *mean (device) = mean |w| of the tensor, summed in double in a fixed tree order (the same
// bits every run). The CPU (quant/ternary.cpp) adds in another order, also in double: the two
// doubles differ by ~1e-16 relative, so the float is the CPU's unless they straddle a float
// rounding boundary (~1e-8 of tensors).
void mean_abs(float* mean, const float* w, size_t count, double* scratch);
size_t mean_abs_scratch_doubles(size_t count);
// *out = 1 / *in (device): a dqt weight's weight_scale from its scale, as code_weight_scale.
void reciprocal(float* out, const float* in);
// q (count) int8 = clip(round(w / (*gamma + eps)), -1, 1); dense (optional) = q * *gamma.
void ternary_codes(int8_t* q, float* dense, const float* w, size_t count, const float* gamma);

// Rows of x (rows, cols): a (rows, cols) int8, scales (rows), x = a / s in place.
void fake_quantize_rows(float* x, int8_t* a, float* scales, int rows, int cols);

// out (rows, cols) = products (rows, cols) int32 * (*weight_scale / scales[row]); weight_scale
// a device pointer.
void scale_integer_products(float* out, const int32_t* products, const float* scales, const float* weight_scale,
                            int rows, int cols);

}  // namespace dqt::cuda
