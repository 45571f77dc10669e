#include "kernels/int8_rows.h"

#include <algorithm>
#include <cmath>

#include "kernels/vecmath.h"

namespace dqt {

namespace {

// Cloned for AVX-512 / AVX2: the lanes vectorise the max, and rounding is one instruction.
DQT_TARGET_CLONES float quantize_row(const float* x, int cols, int8_t* a, int32_t* sum_out) {
    // abs_max_f32's independent lanes vectorise; a plain float max reduction would not (no -ffast-math).
    const float scale = 127.0f / std::max(abs_max_f32(x, cols), 1e-5f);
    int32_t sum = 0;
    for (int c = 0; c < cols; ++c) {
        const int8_t q = static_cast<int8_t>(std::min(std::max(std::nearbyint(x[c] * scale), -128.0f), 127.0f));
        a[c] = q;
        sum += q;
    }
    if (sum_out != nullptr) *sum_out = sum;
    return scale;
}

}  // namespace

float quantize_row_int8(const float* x, int cols, int8_t* a, int32_t* sum_out) {
    return quantize_row(x, cols, a, sum_out);
}

void Int8Rows::reshape(int new_rows, int new_cols) {
    if (rows == new_rows && cols == new_cols) return;
    const int new_padded = int8_padded_cols(new_cols);
    const size_t needed = static_cast<size_t>(new_rows) * new_padded;
    if (needed > values.size()) values = Array<int8_t>(MemCategory::scratch, needed);
    // Every row's padding must be zero (the kernels multiply it); the values are overwritten.
    std::fill(values.begin(), values.begin() + needed, int8_t{0});
    rows = new_rows;
    cols = new_cols;
    padded_cols = new_padded;
    scales.assign(static_cast<size_t>(rows), 0.0f);
    sums.assign(static_cast<size_t>(rows), 0);
}

void quantize_rows_int8(const float* x, int rows, int cols, Int8Rows& out) {
    out.reshape(rows, cols);
#pragma omp parallel for schedule(static)
    for (int r = 0; r < rows; ++r)
        out.scales[r] = quantize_row(x + static_cast<size_t>(r) * cols, cols,
                                     out.values.data() + static_cast<size_t>(r) * out.padded_cols, &out.sums[r]);
}

}  // namespace dqt
