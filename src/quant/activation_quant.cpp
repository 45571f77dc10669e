#include "quant/activation_quant.h"

#include <algorithm>
#include <cmath>
#include <cstddef>

#include "kernels/vecmath.h"

namespace dqt {

namespace {

// Cloned for AVX-512 / AVX2: there nearbyint is one vector instruction instead of a libm call.
DQT_TARGET_CLONES void quantize_row(float* row, int cols) {
    // Independent lanes: a plain max reduction over floats does not vectorise without -ffast-math.
    float lane[kLanes] = {};
    int j = 0;
    for (; j + kLanes <= cols; j += kLanes)
        for (int l = 0; l < kLanes; ++l) lane[l] = std::max(lane[l], std::fabs(row[j + l]));
    for (; j < cols; ++j) lane[0] = std::max(lane[0], std::fabs(row[j]));
    float absmax = 0.0f;
    for (int l = 0; l < kLanes; ++l) absmax = std::max(absmax, lane[l]);
    const float scale = 127.0f / std::max(absmax, 1e-5f);
    for (j = 0; j < cols; ++j) row[j] = std::min(std::max(std::nearbyint(row[j] * scale), -128.0f), 127.0f) / scale;
}

}  // namespace

void absmax_quantize_rows(float* x, int rows, int cols) {
#pragma omp parallel for schedule(static)
    for (int r = 0; r < rows; ++r) quantize_row(x + static_cast<size_t>(r) * cols, cols);
}

}  // namespace dqt
