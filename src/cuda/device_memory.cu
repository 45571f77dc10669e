#include "cuda/device_memory.h"

#include <array>
#include <atomic>
#include <mutex>
#include <unordered_map>
#include <utility>
#include <vector>

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

// Freed blocks are kept for reuse, by size: cudaMalloc and cudaFree synchronise the whole
// device, and a training step asks for the same scratch sizes every step, so after the first
// step no op waits for the allocator. Sizes are rounded up to kGranule. Everything runs on the
// default stream, so a block handed out again is used only after the kernels that used it
// before (stream order). Cached blocks go back to the driver when an allocation does not fit.
constexpr size_t kGranule = 512;

class BlockCache {
public:
    void* take(size_t bytes) {
        const std::lock_guard<std::mutex> hold(lock_);
        auto found = free_.find(bytes);
        if (found == free_.end() || found->second.empty()) return nullptr;
        void* block = found->second.back();
        found->second.pop_back();
        cached_bytes_ -= bytes;
        return block;
    }
    void give(void* block, size_t bytes) {
        const std::lock_guard<std::mutex> hold(lock_);
        free_[bytes].push_back(block);
        cached_bytes_ += bytes;
    }
    void return_to_driver() {
        const std::lock_guard<std::mutex> hold(lock_);
        for (auto& [bytes, blocks] : free_) {
            for (void* block : blocks) cudaFree(block);
        }
        free_.clear();
        cached_bytes_ = 0;
    }
    int64_t cached_bytes() const { return static_cast<int64_t>(cached_bytes_); }

private:
    std::mutex lock_;
    std::unordered_map<size_t, std::vector<void*>> free_;
    size_t cached_bytes_ = 0;
};

BlockCache& block_cache() {
    static BlockCache* cache = new BlockCache;  // never destroyed: buffers may outlive static destruction
    return *cache;
}

}  // namespace

int64_t device_cached_bytes() { return block_cache().cached_bytes(); }

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

size_t device_block_bytes(size_t bytes) { return (bytes + kGranule - 1) / kGranule * kGranule; }

DeviceBuffer::DeviceBuffer(MemCategory category, size_t bytes)
    : bytes_(bytes), block_bytes_(device_block_bytes(bytes)), category_(category) {
    if (bytes == 0) return;
    data_ = block_cache().take(block_bytes_);
    if (data_) {
        ledger_add(category_, static_cast<int64_t>(block_bytes_));
        return;
    }
    cudaError_t status = cudaMalloc(&data_, block_bytes_);
    if (status == cudaErrorMemoryAllocation) {  // the cache's blocks may make room
        cudaGetLastError();
        block_cache().return_to_driver();
        status = cudaMalloc(&data_, block_bytes_);
    }
    if (status != cudaSuccess) {
        cudaGetLastError();
        data_ = nullptr;
        size_t free = 0, total = 0;
        cudaMemGetInfo(&free, &total);
        throw Error("out of GPU memory: " + std::to_string(bytes >> 20) + " MiB of " + mem_category_name(category) +
                    " asked, " + std::to_string(free >> 20) + " MiB of " + std::to_string(total >> 20) +
                    " MiB free (" + cudaGetErrorString(status) + "): use a smaller batch or model");
    }
    ledger_add(category_, static_cast<int64_t>(block_bytes_));
}

DeviceBuffer::~DeviceBuffer() { release(); }

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      bytes_(std::exchange(other.bytes_, 0)),
      block_bytes_(std::exchange(other.block_bytes_, 0)),
      category_(other.category_) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
    if (this != &other) {
        release();
        data_ = std::exchange(other.data_, nullptr);
        bytes_ = std::exchange(other.bytes_, 0);
        block_bytes_ = std::exchange(other.block_bytes_, 0);
        category_ = other.category_;
    }
    return *this;
}

void DeviceBuffer::zero() {
    if (data_) cuda_check(cudaMemset(data_, 0, bytes_), "cudaMemset");
}

void DeviceBuffer::release() {
    if (!data_) return;
    block_cache().give(data_, block_bytes_);
    ledger_add(category_, -static_cast<int64_t>(block_bytes_));
    data_ = nullptr;
    bytes_ = 0;
    block_bytes_ = 0;
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
