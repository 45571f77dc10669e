#include "kernels/rmsnorm.h"

#include <algorithm>
#include <cmath>
#include <cstddef>

#include "kernels/vecmath.h"

namespace dqt {

namespace {

void normalize_row(float* y, float* rstd, const float* x, const float* gain, int cols, float eps) {
    const float s = static_cast<float>(1.0 / std::sqrt(dot_f64(x, x, cols) / cols + eps));
    *rstd = s;
    for (int c = 0; c < cols; ++c) y[c] = x[c] * s * gain[c];
}

}  // namespace

void rmsnorm_forward(float* y, float* rstd, const float* x, const float* gain, int rows, int cols, float eps) {
    // One row (decode) is a microsecond of work: cheaper on this thread than woken threads.
#pragma omp parallel for schedule(static) if (rows > 1)
    for (int r = 0; r < rows; ++r) {
        const size_t offset = static_cast<size_t>(r) * cols;
        normalize_row(y + offset, rstd + r, x + offset, gain, cols, eps);  // (cols) rows
    }
}

void rmsnorm_forward_serial(float* y, float* rstd, const float* x, const float* gain, int rows, int cols, float eps) {
    for (int r = 0; r < rows; ++r) {
        const size_t offset = static_cast<size_t>(r) * cols;
        normalize_row(y + offset, rstd + r, x + offset, gain, cols, eps);
    }
}

void rmsnorm_backward(float* dx, float* dgain, const float* dy, const float* x, const float* gain,
                      const float* rstd, int rows, int cols) {
    // dx_c = s * g_c * dy_c - s^3 / cols * x_c * sum_k(dy_k * g_k * x_k)
#pragma omp parallel for schedule(static)
    for (int r = 0; r < rows; ++r) {
        const size_t base = static_cast<size_t>(r) * cols;
        const float* dyr = dy + base;  // (cols)
        const float* xr = x + base;    // (cols)
        float* dxr = dx + base;        // (cols)
        double lane[kLanes] = {};
        int c = 0;
        for (; c + kLanes <= cols; c += kLanes)
            for (int l = 0; l < kLanes; ++l) lane[l] += static_cast<double>(dyr[c + l]) * gain[c + l] * xr[c + l];
        for (; c < cols; ++c) lane[0] += static_cast<double>(dyr[c]) * gain[c] * xr[c];
        double dot = 0;
        for (int l = 0; l < kLanes; ++l) dot += lane[l];
        const float s = rstd[r];
        const float coef = static_cast<float>(static_cast<double>(s) * s * s * dot / cols);
        for (c = 0; c < cols; ++c) dxr[c] += s * gain[c] * dyr[c] - coef * xr[c];
    }
    // dgain_c = sum_r dy_rc * x_rc * s_r: each column block is owned by one thread and summed
    // over rows in order, so the result does not depend on the thread count.
    constexpr int kBlock = 64;
    const int blocks = (cols + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static)
    for (int blk = 0; blk < blocks; ++blk) {
        const int c0 = blk * kBlock, width = std::min(kBlock, cols - c0);
        double acc[kBlock] = {};
        for (int r = 0; r < rows; ++r) {
            const size_t base = static_cast<size_t>(r) * cols + c0;
            const double s = rstd[r];
            for (int c = 0; c < width; ++c) acc[c] += static_cast<double>(dy[base + c]) * x[base + c] * s;
        }
        for (int c = 0; c < width; ++c) dgain[c0 + c] += static_cast<float>(acc[c]);
    }
}

}  // namespace dqt
