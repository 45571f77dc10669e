#pragma once
// The one slow reference of the integer products (int8, 2-bit ternary, ternary lookup): weight
// by weight, int64 sums, then the float epilogue every fast path shares. The sums are exact on
// every path, so the fast kernels must equal this bit for bit. Each product supplies only how to
// read its weight code at (row, column).
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/error.h"
#include "kernels/int8_rows.h"

namespace dqt {

// out (x.rows, weight_rows) = int8_output_factor(weight_scale, x.scales[r]) * sum_c code_at(o, c) * a[r][c].
template <typename CodeAt>
void integer_matmul_reference(const char* name, int weight_rows, int weight_cols, float weight_scale,
                              const CodeAt& code_at, const Int8Rows& x, float* out) {
    require(x.cols == weight_cols, std::string(name) + ": activations have " + std::to_string(x.cols) +
                                       " columns, weights " + std::to_string(weight_cols));
    for (int r = 0; r < x.rows; ++r) {
        const float factor = int8_output_factor(weight_scale, x.scales[r]);
        for (int o = 0; o < weight_rows; ++o) {
            int64_t dot = 0;
            for (int c = 0; c < weight_cols; ++c) dot += static_cast<int64_t>(code_at(o, c)) * x.row(r)[c];
            out[static_cast<size_t>(r) * weight_rows + o] = factor * static_cast<float>(dot);
        }
    }
}

}  // namespace dqt
