#pragma once
// DQT_HOST_DEVICE marks the few inline functions that the CPU code and the CUDA kernels
// (src/cuda/) share, so both compute the same bits from one definition: the random numbers,
// the rounding and one element of the DQT update. Empty outside nvcc.
#ifdef __CUDACC__
#define DQT_HOST_DEVICE __host__ __device__
#else
#define DQT_HOST_DEVICE
#endif
