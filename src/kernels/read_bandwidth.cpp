#include "kernels/read_bandwidth.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <string>

#include "core/error.h"
#include "core/memory.h"
#include "kernels/vecmath.h"

namespace dqt {

namespace {

// Not instrumented in sanitizer builds: a check on every load would make the measuring loop
// compute-bound, and the rates it measures (and the cache regime told from them) meaningless
// there. clang refuses no_sanitize on a multiversioned function, so its builds (the fuzzers,
// TSan) take one baseline version.
#if defined(__clang__)
#define DQT_MEASURING_LOOP __attribute__((no_sanitize("address", "undefined")))
#else
#define DQT_MEASURING_LOOP __attribute__((no_sanitize("address", "undefined"))) DQT_TARGET_CLONES
#endif

// Sum of words [0, count), with independent lanes so it vectorises (AVX-512 where present):
// the loop then waits on memory, not on additions.
DQT_MEASURING_LOOP uint64_t sum_words(const uint64_t* words, size_t count) {
    constexpr int kLanes = 16;
    uint64_t lane[kLanes] = {};
    size_t i = 0;
    for (; i + kLanes <= count; i += kLanes)
        for (int l = 0; l < kLanes; ++l) lane[l] += words[i + l];
    for (; i < count; ++i) lane[0] += words[i];
    uint64_t sum = 0;
    for (int l = 0; l < kLanes; ++l) sum += lane[l];
    return sum;
}

}  // namespace

ReadBandwidth::ReadBandwidth(size_t words, int sweeps) : words_(words), sweeps_(sweeps) {
    const size_t bytes = words * sizeof(uint64_t);
    // Allocated as the model's buffers are (core/memory.h), so that the bound reads memory paged
    // as the weights are.
    void* memory = allocate_buffer_memory(bytes);
    if (!memory) throw Error("out of memory allocating the " + std::to_string(bytes) + "-byte bandwidth buffer");
    data_.reset(static_cast<uint64_t*>(memory));
    std::fill(data_.get(), data_.get() + words, uint64_t{1});
}

void ReadBandwidth::Free::operator()(uint64_t* words) const { std::free(words); }

ReadBandwidth::ReadBandwidth(uint64_t cache_bytes)
    : ReadBandwidth(static_cast<size_t>(std::max<uint64_t>(uint64_t{512} << 20, 4 * cache_bytes) / sizeof(uint64_t)), 1) {}

ReadBandwidth ReadBandwidth::over_exactly(uint64_t bytes) {
    const uint64_t words = std::max<uint64_t>(1, bytes / sizeof(uint64_t));
    constexpr uint64_t kBytesPerPass = uint64_t{64} << 20;
    const uint64_t sweeps = std::max<uint64_t>(1, kBytesPerPass / (words * sizeof(uint64_t)));
    return ReadBandwidth(static_cast<size_t>(words), static_cast<int>(sweeps));
}

void ReadBandwidth::measure_pass() {
    const auto start = std::chrono::steady_clock::now();
    uint64_t sum = 0;
#pragma omp parallel reduction(+ : sum)
    {
        const size_t count = words_, threads = static_cast<size_t>(omp_get_num_threads());
        const size_t share = (count + threads - 1) / threads;
        const size_t first = std::min(count, share * static_cast<size_t>(omp_get_thread_num()));
        for (int sweep = 0; sweep < sweeps_; ++sweep) {
            sum += sum_words(data_.get() + first, std::min(share, count - first));
            asm volatile("" ::: "memory");  // each sweep reads the words again: no call is merged
        }
    }
    best_seconds_ = std::min(best_seconds_, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    require(sum == words_ * static_cast<uint64_t>(sweeps_), "bandwidth pass lost data");  // keeps the sum from being optimised away
}

}  // namespace dqt
