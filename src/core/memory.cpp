#include "core/memory.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>

#include "core/error.h"

namespace dqt {

const char* mem_category_name(MemCategory category) {
    switch (category) {
        case MemCategory::weights: return "weights";
        case MemCategory::gradients: return "gradients";
        case MemCategory::optimizer: return "optimizer";
        case MemCategory::activations: return "activations";
        case MemCategory::scratch: return "scratch";
        case MemCategory::data: return "data";
        case MemCategory::snapshot: return "snapshot";
        case MemCategory::count: break;
    }
    return "unknown";
}

MemoryLedger& memory_ledger() {
    static MemoryLedger ledger;
    return ledger;
}

static void raise_peak(std::atomic<int64_t>& peak, int64_t value) {
    int64_t seen = peak.load(std::memory_order_relaxed);
    while (value > seen && !peak.compare_exchange_weak(seen, value, std::memory_order_relaxed)) {
    }
}

static void ledger_add(MemCategory category, int64_t bytes) {
    MemoryLedger& ledger = memory_ledger();
    const int index = static_cast<int>(category);
    const int64_t live = ledger.live[index].fetch_add(bytes) + bytes;
    const int64_t total = ledger.live_total.fetch_add(bytes) + bytes;
    if (bytes > 0) {
        raise_peak(ledger.peak[index], live);
        raise_peak(ledger.peak_total, total);
    }
}

int64_t memory_live_bytes(MemCategory category) { return memory_ledger().live[static_cast<int>(category)].load(); }
int64_t memory_peak_bytes(MemCategory category) { return memory_ledger().peak[static_cast<int>(category)].load(); }
int64_t memory_peak_total_bytes() { return memory_ledger().peak_total.load(); }

void memory_reset_peaks() {
    MemoryLedger& ledger = memory_ledger();
    for (int i = 0; i < kMemCategoryCount; ++i) ledger.peak[i].store(ledger.live[i].load());
    ledger.peak_total.store(ledger.live_total.load());
}

static int64_t read_status_kib(const char* key) {
    FILE* file = std::fopen("/proc/self/status", "r");
    if (!file) return -1;
    char line[256];
    int64_t kib = -1;
    const size_t key_length = std::strlen(key);
    while (std::fgets(line, sizeof line, file)) {
        if (std::strncmp(line, key, key_length) == 0) {
            kib = std::atoll(line + key_length);
            break;
        }
    }
    std::fclose(file);
    return kib;
}

int64_t peak_rss_bytes() { return read_status_kib("VmHWM:") * 1024; }

int64_t physical_memory_bytes() {
    return static_cast<int64_t>(sysconf(_SC_PHYS_PAGES)) * static_cast<int64_t>(sysconf(_SC_PAGE_SIZE));
}

namespace {
// A buffer's allocation: its bytes rounded up to whole 64-byte lines (aligned_alloc needs a
// multiple of the alignment; Buffer zeroes the whole of it).
size_t allocated_bytes(size_t bytes) { return (bytes + 63) / 64 * 64; }
}  // namespace

void* allocate_buffer_memory(size_t bytes) {
    constexpr size_t kHugePageBytes = size_t{2} << 20;
    const size_t rounded = allocated_bytes(bytes);
    if (rounded < kHugePageBytes) return std::aligned_alloc(64, rounded);
    void* memory = nullptr;
    if (posix_memalign(&memory, kHugePageBytes, rounded) != 0) return nullptr;
    madvise(memory, rounded / kHugePageBytes * kHugePageBytes, MADV_HUGEPAGE);  // a hint, before the first touch
    return memory;
}

Buffer::Buffer(MemCategory category, size_t bytes) : bytes_(bytes), category_(category) {
    if (bytes == 0) return;
    data_ = allocate_buffer_memory(bytes);
    if (!data_) throw Error("out of memory allocating " + std::to_string(bytes) + " bytes of " + mem_category_name(category));
    std::memset(data_, 0, allocated_bytes(bytes));
    ledger_add(category_, static_cast<int64_t>(bytes_));
}

Buffer::~Buffer() { release(); }

void Buffer::release() {
    if (data_) {
        std::free(data_);
        ledger_add(category_, -static_cast<int64_t>(bytes_));
    }
    data_ = nullptr;
    bytes_ = 0;
}

Buffer::Buffer(Buffer&& other) noexcept : data_(other.data_), bytes_(other.bytes_), category_(other.category_) {
    other.data_ = nullptr;
    other.bytes_ = 0;
}

Buffer& Buffer::operator=(Buffer&& other) noexcept {
    if (this != &other) {
        release();
        data_ = other.data_;
        bytes_ = other.bytes_;
        category_ = other.category_;
        other.data_ = nullptr;
        other.bytes_ = 0;
    }
    return *this;
}

}  // namespace dqt
