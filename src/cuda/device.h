#pragma once
// The CUDA device dqt runs on (build with cmake -DDQT_CUDA=ON). Every CUDA call goes through
// cuda_check, which turns a failure into one dqt::Error line naming the call; a missing GPU
// is found before anything is allocated.
#include <string>

namespace dqt::cuda {

struct DeviceInfo {
    std::string name;
    int multiprocessors = 0;
    int compute_major = 0, compute_minor = 0;
    size_t total_bytes = 0;  // device memory
    size_t l2_bytes = 0;
};

// Number of CUDA GPUs this process can use (0 without a driver or a device; never throws).
int gpu_count();
// dqt::Error "no CUDA GPU is available (...): train with --device cpu" unless gpu_count() > 0;
// then selects device 0 and returns what it is.
DeviceInfo require_gpu();
// Waits for every kernel launched so far, and turns a failed one into a dqt::Error.
void synchronize(const char* what);

}  // namespace dqt::cuda
