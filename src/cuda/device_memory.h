#pragma once
// Accounted GPU memory: every cudaMalloc of dqt goes through DeviceBuffer, tagged with the
// categories of the CPU ledger (core/memory.h), so the GPU's memory report says what each
// category holds and its peak, beside the driver's view of the device (which also counts the
// CUDA context, libraries' workspaces and the blocks freed buffers leave cached for reuse).
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/memory.h"

namespace dqt::cuda {

int64_t device_live_bytes(MemCategory category);
int64_t device_peak_bytes(MemCategory category);
int64_t device_peak_total_bytes();
// Blocks of freed buffers kept for reuse (in no category; returned to the driver when an
// allocation would not fit otherwise).
int64_t device_cached_bytes();
void device_reset_peaks();

// The driver's view: bytes in use on the device by anyone, and its total.
struct DriverMemory {
    size_t used = 0, total = 0;
};
DriverMemory driver_memory();

// The block an allocation of `bytes` is held in (rounded up to 512 bytes): what the ledger counts.
size_t device_block_bytes(size_t bytes);

// One accounted device allocation (not zeroed; zero() does), held in a block rounded up to 512
// bytes, which the ledger counts. Movable, not copyable. An allocation the device cannot hold is a dqt::Error naming the category, the
// size and what is free.
class DeviceBuffer {
public:
    DeviceBuffer() = default;
    DeviceBuffer(MemCategory category, size_t bytes);
    ~DeviceBuffer();
    DeviceBuffer(DeviceBuffer&& other) noexcept;
    DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
    DeviceBuffer(const DeviceBuffer&) = delete;
    DeviceBuffer& operator=(const DeviceBuffer&) = delete;

    void* data() const { return data_; }
    size_t bytes() const { return bytes_; }
    template <typename T> T* as() const { return static_cast<T*>(data_); }
    void zero();
    void release();

private:
    void* data_ = nullptr;
    size_t bytes_ = 0;        // asked for
    size_t block_bytes_ = 0;  // held (rounded up), what the ledger counts
    MemCategory category_ = MemCategory::scratch;
};

// A typed device array with host copies in and out.
template <typename T>
class DeviceArray {
public:
    DeviceArray() = default;
    DeviceArray(MemCategory category, size_t count) : buffer_(category, count * sizeof(T)), count_(count) {}
    T* data() const { return buffer_.as<T>(); }
    size_t size() const { return count_; }
    size_t bytes() const { return buffer_.bytes(); }
    void zero() { buffer_.zero(); }

private:
    DeviceBuffer buffer_;
    size_t count_ = 0;
};

// Device to device, and zeroing, in stream order.
void copy_on_device(void* to, const void* from, size_t bytes);
void zero_on_device(void* data, size_t bytes);

// Synchronous copies (they wait for the kernels before them).
void copy_to_device(void* device, const void* host, size_t bytes);
void copy_to_host(void* host, const void* device, size_t bytes);

template <typename T>
DeviceArray<T> to_device(MemCategory category, const T* host, size_t count) {
    DeviceArray<T> array(category, count);
    copy_to_device(array.data(), host, count * sizeof(T));
    return array;
}

}  // namespace dqt::cuda
