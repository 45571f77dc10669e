#pragma once
// Inside src/cuda/*.cu only: a sum and a maximum over one CUDA block (a multiple of 32 threads,
// at most 1024), every thread getting the result, in a fixed order (the same bits every run).
// `shared`: 32 values of the block's shared memory.

namespace dqt::cuda {

template <typename T>
__device__ inline T block_sum(T x, T* shared) {
    for (int offset = 16; offset > 0; offset /= 2) x += __shfl_xor_sync(0xffffffffu, x, offset);
    __syncthreads();  // a previous call's readers are done with shared
    if (threadIdx.x % 32 == 0) shared[threadIdx.x / 32] = x;
    __syncthreads();
    T total = 0;
    for (unsigned w = 0; w < blockDim.x / 32; ++w) total += shared[w];
    return total;
}

__device__ inline float block_max(float x, float* shared) {
    for (int offset = 16; offset > 0; offset /= 2) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, offset));
    __syncthreads();
    if (threadIdx.x % 32 == 0) shared[threadIdx.x / 32] = x;
    __syncthreads();
    float best = shared[0];
    for (unsigned w = 1; w < blockDim.x / 32; ++w) best = fmaxf(best, shared[w]);
    return best;
}

}  // namespace dqt::cuda
