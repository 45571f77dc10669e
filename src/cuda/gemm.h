#pragma once
// Matrix products on the GPU through cuBLASLt (part of the CUDA toolkit): fp32 operands in fp32
// (no TF32: the reference the tests hold the CPU to), bf16 operands on the tensor cores with
// fp32 sums and an fp32 result, and int8 operands on the tensor cores with exact int32 sums
// (the quantized forward: int8 activations times ternary or n-bit codes). Row-major, as the
// rest of dqt.
#include <cstddef>
#include <cstdint>

#include "cuda/device_memory.h"

namespace dqt::cuda {

struct GemmOperand {
    const void* data;  // device: float*, or uint16_t* bf16 bits
    bool bf16;
};

// A batch of equally spaced row-major matrices: element (r, c) of matrix i at
// data + i * stride + r * ld + c, in elements.
struct StridedMatrices {
    GemmOperand operand;
    int64_t ld;
    int64_t stride;
};

class Gemm {
public:
    Gemm();  // one handle and its workspace (category scratch)
    ~Gemm();
    Gemm(const Gemm&) = delete;
    Gemm& operator=(const Gemm&) = delete;
    // c (m, n) = op(a) (m, k) · op(b) (k, n) + beta * c, op(x) = x^T when transposed; a and b
    // the same precision.
    void multiply(GemmOperand a, bool transpose_a, GemmOperand b, bool transpose_b, float* c, int m, int n, int k,
                  float beta) const;
    // The same for `batch` products at once: c_i (m, n) = op(a_i) op(b_i) + beta * c_i, c fp32
    // with row stride ldc and matrix stride stride_c.
    void multiply_batched(StridedMatrices a, bool transpose_a, StridedMatrices b, bool transpose_b, float* c,
                          int64_t ldc, int64_t stride_c, int m, int n, int k, int batch, float beta) const;

    // c (m, n) = a (m, k) . w (n, k)^T in int32, exactly; k a multiple of 4.
    void multiply_int8(const int8_t* a, const int8_t* w, int32_t* c, int m, int n, int k) const;

private:
    void* handle_ = nullptr;  // cublasLtHandle_t
    DeviceBuffer workspace_;
};

// out[i] = bf16 bits of in[i], rounded to nearest even (quant/bf16.h's rule).
void round_to_bf16(uint16_t* out, const float* in, size_t count);
// x[i] = round_to_bf16(x[i]) as a float (quant/bf16.h's round_to_bf16_in_place).
void round_to_bf16_in_place(float* x, size_t count);

}  // namespace dqt::cuda
