#include "quant/activation_quant.h"

#include <algorithm>
#include <cmath>
#include <cstddef>

#include "kernels/vecmath.h"

namespace dqt {

namespace {

// Cloned for AVX-512 / AVX2: there nearbyint is one vector instruction instead of a libm call.
DQT_TARGET_CLONES void quantize_row(float* row, int cols) {
    // abs_max_f32's independent lanes vectorise; a plain float max reduction would not (no -ffast-math).
    const float scale = 127.0f / std::max(abs_max_f32(row, cols), 1e-5f);
    for (int j = 0; j < cols; ++j) row[j] = std::min(std::max(std::nearbyint(row[j] * scale), -128.0f), 127.0f) / scale;
}

}  // namespace

void absmax_quantize_rows(float* x, int rows, int cols) {
#pragma omp parallel for schedule(static)
    for (int r = 0; r < rows; ++r) quantize_row(x + static_cast<size_t>(r) * cols, cols);
}

}  // namespace dqt
