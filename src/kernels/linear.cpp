#include "kernels/linear.h"

#include "kernels/gemm.h"

namespace dqt {

void linear_forward(float* out, const float* in, const float* weight, int rows, int in_features, int out_features) {
    gemm(false, true, rows, out_features, in_features, 1.0f, in, in_features, weight, in_features, 0.0f, out,
         out_features);
}

void linear_backward_input(float* din, const float* dout, int ld_dout, const float* weight, int rows, int in_features,
                           int out_features) {
    gemm(false, false, rows, in_features, out_features, 1.0f, dout, ld_dout, weight, in_features, 1.0f, din,
         in_features);
}

void linear_backward_weight(float* dweight, const float* dout, int ld_dout, const float* in, int rows,
                            int in_features, int out_features) {
    gemm(true, false, out_features, in_features, rows, 1.0f, dout, ld_dout, in, in_features, 1.0f, dweight,
         in_features);
}

}  // namespace dqt
