#pragma once
// The one int8 activation quantizer of dqt (BitNet b1.58's absmax, per row): for a row x,
//   s = 127 / max(max_j |x_j|, 1e-5),  a_j = clip(round_half_even(x_j * s), -128, 127),  x ~ a / s.
// The training forward's fake quantization (quant/activation_quant.h) and every integer
// kernel (kernels/ternary_matmul.h, kernels/int8_matmul.h) call this same function, so the
// integers a training step multiplies are the integers inference multiplies, bit for bit.
// |x_j * s| <= 127, so in practice a_j lies in [-127, 127].
#include <cstdint>
#include <vector>

#include "core/host_device.h"
#include "core/memory.h"

namespace dqt {

// Columns of an Int8Rows row are padded with zeros to a multiple of this (the ternary block).
inline constexpr int kInt8RowAlign = 256;

inline int int8_padded_cols(int cols) { return (cols + kInt8RowAlign - 1) / kInt8RowAlign * kInt8RowAlign; }

// One row: writes a[0, cols) and returns s. sum_out (optional) receives sum_j a_j.
float quantize_row_int8(const float* x, int cols, int8_t* a, int32_t* sum_out);

// The output scale of an integer product: out = int8_output_factor(w, s) * (integer dot), for
// weights W = q * weight_scale and activations x ~ a / s. Every integer path and the training
// forward use this one expression, so their float epilogues round alike.
DQT_HOST_DEVICE inline float int8_output_factor(float weight_scale, float activation_scale) { return weight_scale / activation_scale; }

// Activation rows quantized for the integer kernels.
struct Int8Rows {
    int rows = 0;
    int cols = 0;
    int padded_cols = 0;         // int8_padded_cols(cols)
    Array<int8_t> values;        // (rows, padded_cols), zero in the padding, category scratch
    std::vector<float> scales;   // (rows) s: x ~ a / s
    std::vector<int32_t> sums;   // (rows) sum of a over the row

    const int8_t* row(int r) const { return values.data() + static_cast<size_t>(r) * padded_cols; }
    int8_t* mutable_row(int r) { return values.data() + static_cast<size_t>(r) * padded_cols; }
    // Sizes the buffers for (rows, cols), zeroed, when the shape changes (reallocating only to
    // grow); for callers that fill the rows themselves with quantize_row_int8.
    void reshape(int new_rows, int new_cols);
};

// x (rows, cols) -> out, reallocating out only when its shape changes. Parallel over rows.
void quantize_rows_int8(const float* x, int rows, int cols, Int8Rows& out);

}  // namespace dqt
