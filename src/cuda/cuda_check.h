#pragma once
// Inside src/cuda/*.cu only: checks a CUDA runtime or cuBLASLt status and each kernel launch.
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <string>

#include "core/error.h"

namespace dqt::cuda {

inline void cuda_check(cudaError_t status, const char* what) {
    if (status != cudaSuccess) {
        throw Error(std::string("CUDA: ") + what + " failed: " + cudaGetErrorString(status));
    }
}

inline void cublas_check(cublasStatus_t status, const char* what) {
    if (status != CUBLAS_STATUS_SUCCESS) {
        throw Error(std::string("cuBLASLt: ") + what + " failed with status " + std::to_string(static_cast<int>(status)));
    }
}

// After a kernel launch: a bad configuration shows here, a fault at the next synchronize.
inline void check_launch(const char* kernel) { cuda_check(cudaGetLastError(), kernel); }

// Blocks of `threads` covering `count` items.
inline unsigned blocks_for(size_t count, unsigned threads) {
    return static_cast<unsigned>((count + threads - 1) / threads);
}

}  // namespace dqt::cuda
