#include "cuda/device.h"

#include "cuda/cuda_check.h"

namespace dqt::cuda {

int gpu_count() {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess) {
        cudaGetLastError();  // clear the sticky "no driver" error
        return 0;
    }
    return count;
}

DeviceInfo require_gpu() {
    int count = 0;
    const cudaError_t status = cudaGetDeviceCount(&count);
    if (status != cudaSuccess || count == 0) {
        cudaGetLastError();
        throw Error(std::string("no CUDA GPU is available (") +
                    (status != cudaSuccess ? cudaGetErrorString(status) : "the driver sees no device") +
                    "): train with --device cpu");
    }
    cuda_check(cudaSetDevice(0), "cudaSetDevice(0)");
    cudaDeviceProp props{};
    cuda_check(cudaGetDeviceProperties(&props, 0), "cudaGetDeviceProperties");
    DeviceInfo info;
    info.name = props.name;
    info.multiprocessors = props.multiProcessorCount;
    info.compute_major = props.major;
    info.compute_minor = props.minor;
    info.total_bytes = props.totalGlobalMem;
    info.l2_bytes = static_cast<size_t>(props.l2CacheSize);
    return info;
}

void synchronize(const char* what) { cuda_check(cudaDeviceSynchronize(), what); }

}  // namespace dqt::cuda
