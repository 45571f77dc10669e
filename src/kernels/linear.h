#pragma once
// Fully connected layer without bias, weights stored (out_features, in_features) like PyTorch.
// Thin wrappers over gemm(), so they inherit its threading and bit-exact determinism.

namespace dqt {

// out (rows, out_features) = in (rows, in_features) · weight^T, weight (out_features, in_features).
void linear_forward(float* out, const float* in, const float* weight, int rows, int in_features, int out_features);

// Given dout (rows, out_features) and the forward's in and weight:
// din (rows, in_features) += dout · weight, skipped if din is null;
// dweight (out_features, in_features) += dout^T · in, skipped if dweight is null.
void linear_backward(float* din, float* dweight, const float* dout, const float* in, const float* weight, int rows,
                     int in_features, int out_features);

}  // namespace dqt
