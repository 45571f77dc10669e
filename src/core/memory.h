#pragma once
// Accounted allocator: every large buffer is tagged with a category, so `dqt train` can
// report exact bytes per category (weights, gradients, optimizer state, activations,
// scratch, data) and the peak of each. Buffers are 64-byte aligned and zero-initialised.
#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>

namespace dqt {

// snapshot: the copy of a checkpoint that a background write reads (io/background_checkpoint.h).
enum class MemCategory : int { weights, gradients, optimizer, activations, scratch, data, snapshot, count };
inline constexpr int kMemCategoryCount = static_cast<int>(MemCategory::count);
const char* mem_category_name(MemCategory category);

// Process-wide ledger of live bytes per category (and the peak of each, and of their sum).
struct MemoryLedger {
    std::array<std::atomic<int64_t>, kMemCategoryCount> live{};
    std::array<std::atomic<int64_t>, kMemCategoryCount> peak{};
    std::atomic<int64_t> live_total{0};
    std::atomic<int64_t> peak_total{0};
};
MemoryLedger& memory_ledger();
int64_t memory_live_bytes(MemCategory category);
int64_t memory_peak_bytes(MemCategory category);
int64_t memory_peak_total_bytes();
// Resets peaks to the current live values (for measuring one phase).
void memory_reset_peaks();
// Peak resident set size of this process as reported by the OS (VmHWM), in bytes.
int64_t peak_rss_bytes();
// The machine's physical memory, in bytes: what a request is checked against before allocating.
int64_t physical_memory_bytes();

// Uninitialised memory for a buffer of `bytes` (> 0), freed with std::free; nullptr when out of
// memory. 64-byte aligned; from 2 MiB on, aligned to 2 MiB and marked for transparent huge pages
// (where the kernel's setting is "madvise", as on Debian, nothing else gives them): a decode
// streams its weights at one TLB entry per 2 MiB instead of per 4 KiB, which a VM's nested page
// walks make dear, and the read bandwidth bound is measured over memory allocated the same way.
void* allocate_buffer_memory(size_t bytes);

// RAII owner of one accounted, aligned, zeroed allocation (allocate_buffer_memory's). Movable,
// not copyable.
class Buffer {
public:
    Buffer() = default;
    Buffer(MemCategory category, size_t bytes);
    ~Buffer();
    Buffer(Buffer&& other) noexcept;
    Buffer& operator=(Buffer&& other) noexcept;
    Buffer(const Buffer&) = delete;
    Buffer& operator=(const Buffer&) = delete;

    void* data() const { return data_; }
    size_t bytes() const { return bytes_; }
    MemCategory category() const { return category_; }
    template <typename T> T* as() const { return static_cast<T*>(data_); }
    void release();

private:
    void* data_ = nullptr;
    size_t bytes_ = 0;
    MemCategory category_ = MemCategory::scratch;
};

// A typed array in one accounted buffer: the common case.
template <typename T>
class Array {
public:
    Array() = default;
    Array(MemCategory category, size_t count) : buffer_(category, count * sizeof(T)), count_(count) {}
    T* data() const { return buffer_.as<T>(); }
    size_t size() const { return count_; }
    T& operator[](size_t i) const { return data()[i]; }
    T* begin() const { return data(); }
    T* end() const { return data() + count_; }
    MemCategory category() const { return buffer_.category(); }
    size_t bytes() const { return buffer_.bytes(); }

private:
    Buffer buffer_;
    size_t count_ = 0;
};

}  // namespace dqt
