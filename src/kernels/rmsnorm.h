#pragma once
// RMSNorm: y = x / sqrt(mean(x^2) + eps) * gain, over the last dimension.
namespace dqt {

// x, y (rows, cols); gain (cols); rstd (rows) = 1 / sqrt(mean(x^2) + eps), saved for backward.
void rmsnorm_forward(float* y, float* rstd, const float* x, const float* gain, int rows, int cols, float eps);
// The same on the calling thread only, for callers already inside a parallel region (an inner
// region, even of one thread, costs the runtime a team).
void rmsnorm_forward_serial(float* y, float* rstd, const float* x, const float* gain, int rows, int cols, float eps);

// dx += dL/dx (rows, cols); dgain += dL/dgain (cols). dy, x (rows, cols); rstd from the forward.
// dgain sums over rows in row order whatever the thread count.
void rmsnorm_backward(float* dx, float* dgain, const float* dy, const float* x, const float* gain,
                      const float* rstd, int rows, int cols);

}  // namespace dqt
