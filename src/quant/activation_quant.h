#pragma once
// 8-bit absmax quantization of the activations entering a quantized linear (BitNet b1.58;
// DQT uses the same): per token (row), s = 127 / max(max_j |x_j|, 1e-5),
// x <- clip(round(x * s), -128, 127) / s. In place: the quantized rows are what the linear
// multiplies and what its weight gradient needs. The backward is straight-through
// (dL/dx = dL/dxq), so it needs no code of its own.
#include <cstdint>

namespace dqt {

void absmax_quantize_rows(float* x, int rows, int cols);  // x (rows, cols)

// One row x (cols): a (cols) receives its int8 values (kernels/int8_rows.h's quantizer), x
// becomes a / s in place; returns s.
float fake_quantize_row(float* x, int cols, int8_t* a);

}  // namespace dqt
