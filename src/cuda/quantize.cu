#include "cuda/quantize.h"

#include <algorithm>

#include "cuda/block_reduce.cuh"
#include "cuda/cuda_check.h"
#include "cuda/device_memory.h"
#include "kernels/int8_rows.h"
#include "quant/ternary.h"

namespace dqt::cuda {

namespace {

constexpr unsigned kThreads = 256;
// mean_abs: a block per kMeanBlockElements elements, at most kMeanMaxBlocks blocks.
constexpr size_t kMeanBlockElements = size_t{1} << 13;
constexpr size_t kMeanMaxBlocks = 1024;

__global__ void codes_to_int8_kernel(int8_t* q, const uint8_t* codes, size_t count, CodeGrid grid) {
    const size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
    if (i < count) q[i] = static_cast<int8_t>(read_code(codes, grid, i));
}

__global__ void dequantize_codes_kernel(float* out, const uint8_t* codes, size_t count, CodeGrid grid,
                                        const float* scale) {
    const size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
    if (i < count) out[i] = static_cast<float>(read_code(codes, grid, i)) / *scale;
}

// partial[block] = sum of |w| in double over the elements a grid-stride loop gives the block's
// threads: a fixed order for a given count (the grid depends on it only), so the same bits each run.
__global__ void abs_sum_blocks_kernel(double* partial, const float* w, size_t count) {
    __shared__ double shared[32];
    double sum = 0.0;
    for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < count;
         i += static_cast<size_t>(gridDim.x) * blockDim.x) {
        sum += fabs(static_cast<double>(w[i]));
    }
    sum = block_sum(sum, shared);
    if (threadIdx.x == 0) partial[blockIdx.x] = sum;
}

// One block: the partial sums, then the mean as a float.
__global__ void mean_from_partials_kernel(float* mean, const double* partial, size_t blocks, size_t count) {
    __shared__ double shared[32];
    double sum = 0.0;
    for (size_t b = threadIdx.x; b < blocks; b += blockDim.x) sum += partial[b];
    sum = block_sum(sum, shared);
    if (threadIdx.x == 0) *mean = static_cast<float>(sum / static_cast<double>(count));
}

__global__ void reciprocal_kernel(float* out, const float* in) { *out = 1.0f / *in; }

__global__ void ternary_codes_kernel(int8_t* q, float* dense, const float* w, size_t count, const float* gamma_in) {
    const size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
    if (i >= count) return;
    const float gamma = *gamma_in;
    const float inv = 1.0f / (gamma + kTernaryEps);
    float code = rintf(w[i] * inv);
    code = code < -1.0f ? -1.0f : (1.0f < code ? 1.0f : code);
    q[i] = static_cast<int8_t>(code);
    if (dense) dense[i] = code * gamma;
}

// A block per row: the row's absmax, then its integers.
__global__ void fake_quantize_rows_kernel(float* x, int8_t* a, float* scales, int cols) {
    __shared__ float shared[32];
    const size_t base = static_cast<size_t>(blockIdx.x) * cols;
    float best = 0.0f;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) best = fmaxf(best, fabsf(x[base + c]));
    for (int offset = 16; offset > 0; offset /= 2) best = fmaxf(best, __shfl_xor_sync(0xffffffffu, best, offset));
    if (threadIdx.x % 32 == 0) shared[threadIdx.x / 32] = best;
    __syncthreads();
    float absmax = shared[0];
    for (unsigned w = 1; w < blockDim.x / 32; ++w) absmax = fmaxf(absmax, shared[w]);
    const float scale = 127.0f / fmaxf(absmax, 1e-5f);
    for (int c = threadIdx.x; c < cols; c += blockDim.x) {
        float q = rintf(x[base + c] * scale);
        q = q < -128.0f ? -128.0f : (127.0f < q ? 127.0f : q);
        a[base + c] = static_cast<int8_t>(q);
        x[base + c] = q / scale;
    }
    if (threadIdx.x == 0) scales[blockIdx.x] = scale;
}

__global__ void scale_integer_products_kernel(float* out, const int32_t* products, const float* scales,
                                              const float* weight_scale, int rows, int cols) {
    const size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
    if (i >= static_cast<size_t>(rows) * cols) return;
    const float factor = int8_output_factor(*weight_scale, scales[i / cols]);
    out[i] = factor * static_cast<float>(products[i]);
}

}  // namespace

void codes_to_int8(int8_t* q, const uint8_t* codes, size_t count, CodeGrid grid) {
    codes_to_int8_kernel<<<blocks_for(count, kThreads), kThreads>>>(q, codes, count, grid);
    check_launch("codes_to_int8_kernel");
}

void dequantize_codes(float* out, const uint8_t* codes, size_t count, CodeGrid grid, const float* scale) {
    dequantize_codes_kernel<<<blocks_for(count, kThreads), kThreads>>>(out, codes, count, grid, scale);
    check_launch("dequantize_codes_kernel");
}

size_t mean_abs_scratch_doubles(size_t count) {
    return std::min(kMeanMaxBlocks, (count + kMeanBlockElements - 1) / kMeanBlockElements);
}

void mean_abs(float* mean, const float* w, size_t count, double* scratch) {
    require(count > 0, "mean_abs: an empty tensor");
    const size_t blocks = mean_abs_scratch_doubles(count);
    abs_sum_blocks_kernel<<<blocks, kThreads>>>(scratch, w, count);
    check_launch("abs_sum_blocks_kernel");
    mean_from_partials_kernel<<<1, kThreads>>>(mean, scratch, blocks, count);
    check_launch("mean_from_partials_kernel");
}

void reciprocal(float* out, const float* in) {
    reciprocal_kernel<<<1, 1>>>(out, in);
    check_launch("reciprocal_kernel");
}

void ternary_codes(int8_t* q, float* dense, const float* w, size_t count, const float* gamma) {
    ternary_codes_kernel<<<blocks_for(count, kThreads), kThreads>>>(q, dense, w, count, gamma);
    check_launch("ternary_codes_kernel");
}

void fake_quantize_rows(float* x, int8_t* a, float* scales, int rows, int cols) {
    fake_quantize_rows_kernel<<<rows, kThreads>>>(x, a, scales, cols);
    check_launch("fake_quantize_rows_kernel");
}

void scale_integer_products(float* out, const int32_t* products, const float* scales, const float* weight_scale,
                            int rows, int cols) {
    const size_t count = static_cast<size_t>(rows) * cols;
    scale_integer_products_kernel<<<blocks_for(count, kThreads), kThreads>>>(out, products, scales, weight_scale, rows,
                                                                             cols);
    check_launch("scale_integer_products_kernel");
}

}  // namespace dqt::cuda
