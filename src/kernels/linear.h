#pragma once
// Fully connected layer without bias, weights stored (out_features, in_features) like PyTorch.
// Thin wrappers over gemm(), so they inherit its threading and bit-exact determinism.

namespace dqt {

// out (rows, out_features) = in (rows, in_features) · weight^T, weight (out_features, in_features).
void linear_forward(float* out, const float* in, const float* weight, int rows, int in_features, int out_features);

// The two products of the backward pass. dout holds (rows, out_features) with a row stride of
// ld_dout >= out_features, so a slice of output features [f0, f1) of a wider layer is
// (dout + f0, ld_dout = its width, out_features = f1 - f0) with the matching rows of weight.
// din (rows, in_features) += dout · weight, weight (out_features, in_features):
void linear_backward_input(float* din, const float* dout, int ld_dout, const float* weight, int rows, int in_features,
                           int out_features);
// dweight (out_features, in_features) += dout^T · in, in (rows, in_features):
void linear_backward_weight(float* dweight, const float* dout, int ld_dout, const float* in, int rows,
                            int in_features, int out_features);

}  // namespace dqt
