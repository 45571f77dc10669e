#include "cuda/gemm.h"

#include <cuda_bf16.h>

#include "cuda/cuda_check.h"

namespace dqt::cuda {

namespace {

constexpr size_t kWorkspaceBytes = size_t{32} << 20;  // cuBLASLt's recommendation for Hopper

__global__ void round_to_bf16_kernel(uint16_t* out, const float* in, size_t count) {
    const size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
    if (i < count) out[i] = __bfloat16_as_ushort(__float2bfloat16_rn(in[i]));
}

__global__ void round_to_bf16_in_place_kernel(float* x, size_t count) {
    const size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
    if (i < count) x[i] = __bfloat162float(__float2bfloat16_rn(x[i]));
}

// A batch of row-major (rows, cols) matrices, row stride ld, as cuBLASLt's column-major (cols, rows).
cublasLtMatrixLayout_t row_major_layout(cudaDataType type, int rows, int cols, int64_t ld, int batch = 1,
                                        int64_t stride = 0) {
    cublasLtMatrixLayout_t layout = nullptr;
    cublas_check(cublasLtMatrixLayoutCreate(&layout, type, static_cast<uint64_t>(cols), static_cast<uint64_t>(rows), ld),
                 "cublasLtMatrixLayoutCreate");
    if (batch > 1) {
        const int32_t count = batch;
        cublas_check(cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof count),
                     "set BATCH_COUNT");
        cublas_check(cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride,
                                                      sizeof stride),
                     "set STRIDED_BATCH_OFFSET");
    }
    return layout;
}

}  // namespace

Gemm::Gemm() : workspace_(MemCategory::scratch, kWorkspaceBytes) {
    cublasLtHandle_t handle = nullptr;
    cublas_check(cublasLtCreate(&handle), "cublasLtCreate");
    handle_ = handle;
}

Gemm::~Gemm() { cublasLtDestroy(static_cast<cublasLtHandle_t>(handle_)); }

void Gemm::multiply(GemmOperand a, bool transpose_a, GemmOperand b, bool transpose_b, float* c, int m, int n, int k,
                    float beta) const {
    multiply_batched({a, transpose_a ? m : k, 0}, transpose_a, {b, transpose_b ? k : n, 0}, transpose_b, c, n, 0, m, n,
                     k, 1, beta);
}

void Gemm::multiply_batched(StridedMatrices a, bool transpose_a, StridedMatrices b, bool transpose_b, float* c,
                            int64_t ldc, int64_t stride_c, int m, int n, int k, int batch, float beta) const {
    require(a.operand.bf16 == b.operand.bf16, "Gemm: both operands must have one precision");
    const cudaDataType operand_type = a.operand.bf16 ? CUDA_R_16BF : CUDA_R_32F;
    // Row-major c = op(a) op(b) is column-major c^T = op(b)^T op(a)^T: cuBLASLt multiplies b's
    // memory (op transpose_b) by a's (op transpose_a).
    cublasLtMatmulDesc_t desc = nullptr;
    cublas_check(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), "cublasLtMatmulDescCreate");
    const cublasOperation_t op_first = transpose_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t op_second = transpose_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublas_check(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_first, sizeof op_first),
                 "set TRANSA");
    cublas_check(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_second, sizeof op_second),
                 "set TRANSB");
    cublasLtMatrixLayout_t first = transpose_b ? row_major_layout(operand_type, n, k, b.ld, batch, b.stride)
                                               : row_major_layout(operand_type, k, n, b.ld, batch, b.stride);
    cublasLtMatrixLayout_t second = transpose_a ? row_major_layout(operand_type, k, m, a.ld, batch, a.stride)
                                                : row_major_layout(operand_type, m, k, a.ld, batch, a.stride);
    cublasLtMatrixLayout_t out = row_major_layout(CUDA_R_32F, m, n, ldc, batch, stride_c);
    const float alpha = 1.0f;
    const cublasStatus_t status =
        cublasLtMatmul(static_cast<cublasLtHandle_t>(handle_), desc, &alpha, b.operand.data, first, a.operand.data,
                       second, &beta, c, out, c, out, nullptr, workspace_.data(), workspace_.bytes(), nullptr);
    cublasLtMatrixLayoutDestroy(first);
    cublasLtMatrixLayoutDestroy(second);
    cublasLtMatrixLayoutDestroy(out);
    cublasLtMatmulDescDestroy(desc);
    cublas_check(status, "cublasLtMatmul");
}

void Gemm::multiply_int8(const int8_t* a, const int8_t* w, int32_t* c, int m, int n, int k) const {
    require(k % 4 == 0, "Gemm::multiply_int8: k must be a multiple of 4, not " + std::to_string(k));
    // Column-major c^T (n, m) = w (n, k) . a^T: the "TN" form the int8 tensor cores take.
    cublasLtMatmulDesc_t desc = nullptr;
    cublas_check(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32I, CUDA_R_32I), "cublasLtMatmulDescCreate");
    const cublasOperation_t transpose = CUBLAS_OP_T, keep = CUBLAS_OP_N;
    cublas_check(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &transpose, sizeof transpose),
                 "set TRANSA");
    cublas_check(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &keep, sizeof keep), "set TRANSB");
    cublasLtMatrixLayout_t first = row_major_layout(CUDA_R_8I, n, k, k);
    cublasLtMatrixLayout_t second = row_major_layout(CUDA_R_8I, m, k, k);
    cublasLtMatrixLayout_t out = row_major_layout(CUDA_R_32I, m, n, n);
    const int32_t alpha = 1, beta = 0;
    const cublasStatus_t status =
        cublasLtMatmul(static_cast<cublasLtHandle_t>(handle_), desc, &alpha, w, first, a, second, &beta, c, out, c, out,
                       nullptr, workspace_.data(), workspace_.bytes(), nullptr);
    cublasLtMatrixLayoutDestroy(first);
    cublasLtMatrixLayoutDestroy(second);
    cublasLtMatrixLayoutDestroy(out);
    cublasLtMatmulDescDestroy(desc);
    cublas_check(status, "cublasLtMatmul (int8)");
}

void round_to_bf16_in_place(float* x, size_t count) {
    round_to_bf16_in_place_kernel<<<blocks_for(count, 256), 256>>>(x, count);
    check_launch("round_to_bf16_in_place_kernel");
}

void round_to_bf16(uint16_t* out, const float* in, size_t count) {
    round_to_bf16_kernel<<<blocks_for(count, 256), 256>>>(out, in, count);
    check_launch("round_to_bf16_kernel");
}

}  // namespace dqt::cuda
