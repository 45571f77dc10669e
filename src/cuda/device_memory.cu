#include "cuda/device_memory.h"

#include <array>
#include <atomic>
#include <utility>

#include "cuda/cuda_check.h"

namespace dqt::cuda {

namespace {

struct DeviceLedger {
    std::array<std::atomic<int64_t>, kMemCategoryCount> live{}, peak{};
    std::atomic<int64_t> live_total{0}, peak_total{0};
};

DeviceLedger& ledger() {
    static DeviceLedger device_ledger;
    return device_ledger;
}

void raise_peak(std::atomic<int64_t>& peak, int64_t value) {
    int64_t seen = peak.load();
    while (value > seen && !peak.compare_exchange_weak(seen, value)) {
    }
}

void ledger_add(MemCategory category, int64_t bytes) {
    DeviceLedger& l = ledger();
    const int index = static_cast<int>(category);
    const int64_t live = l.live[index].fetch_add(bytes) + bytes;
    const int64_t total = l.live_total.fetch_add(bytes) + bytes;
    raise_peak(l.peak[index], live);
    raise_peak(l.peak_total, total);
}

}  // namespace

int64_t device_live_bytes(MemCategory category) { return ledger().live[static_cast<int>(category)].load(); }
int64_t device_peak_bytes(MemCategory category) { return ledger().peak[static_cast<int>(category)].load(); }
int64_t device_peak_total_bytes() { return ledger().peak_total.load(); }

void device_reset_peaks() {
    DeviceLedger& l = ledger();
    for (int i = 0; i < kMemCategoryCount; ++i) l.peak[i].store(l.live[i].load());
    l.peak_total.store(l.live_total.load());
}

DriverMemory driver_memory() {
    size_t free = 0, total = 0;
    cuda_check(cudaMemGetInfo(&free, &total), "cudaMemGetInfo");
    return {total - free, total};
}

DeviceBuffer::DeviceBuffer(MemCategory category, size_t bytes) : bytes_(bytes), category_(category) {
    if (bytes == 0) return;
    const cudaError_t status = cudaMalloc(&data_, bytes);
    if (status != cudaSuccess) {
        cudaGetLastError();
        data_ = nullptr;
        size_t free = 0, total = 0;
        cudaMemGetInfo(&free, &total);
        throw Error("out of GPU memory: " + std::to_string(bytes >> 20) + " MiB of " + mem_category_name(category) +
                    " asked, " + std::to_string(free >> 20) + " MiB of " + std::to_string(total >> 20) +
                    " MiB free (" + cudaGetErrorString(status) + "): use a smaller batch or model");
    }
    ledger_add(category_, static_cast<int64_t>(bytes_));
}

DeviceBuffer::~DeviceBuffer() { release(); }

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), bytes_(std::exchange(other.bytes_, 0)), category_(other.category_) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
    if (this != &other) {
        release();
        data_ = std::exchange(other.data_, nullptr);
        bytes_ = std::exchange(other.bytes_, 0);
        category_ = other.category_;
    }
    return *this;
}

void DeviceBuffer::zero() {
    if (data_) cuda_check(cudaMemset(data_, 0, bytes_), "cudaMemset");
}

void DeviceBuffer::release() {
    if (!data_) return;
    cudaFree(data_);  // a failure here has nowhere to go from a destructor; the next call reports it
    ledger_add(category_, -static_cast<int64_t>(bytes_));
    data_ = nullptr;
    bytes_ = 0;
}

void copy_on_device(void* to, const void* from, size_t bytes) {
    if (bytes) cuda_check(cudaMemcpyAsync(to, from, bytes, cudaMemcpyDeviceToDevice), "cudaMemcpy on the GPU");
}

void zero_on_device(void* data, size_t bytes) {
    if (bytes) cuda_check(cudaMemsetAsync(data, 0, bytes), "cudaMemset");
}

void copy_to_device(void* device, const void* host, size_t bytes) {
    if (bytes) cuda_check(cudaMemcpy(device, host, bytes, cudaMemcpyHostToDevice), "cudaMemcpy to the GPU");
}

void copy_to_host(void* host, const void* device, size_t bytes) {
    if (bytes) cuda_check(cudaMemcpy(host, device, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy from the GPU");
}

}  // namespace dqt::cuda
