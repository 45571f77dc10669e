#pragma once
// This machine's read bandwidth beyond the cache: the limit a memory-bound kernel (one-row
// decode) is measured against, in the same process as the kernel (`dqt bench generate`,
// bench_ternary_batch).
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>

namespace dqt {

// Passes over a buffer of 4 times the last-level cache and at least 512 MiB (so that no pass
// is served from the cache), with the calling OpenMP team's threads, each summing its own
// contiguous share; the best pass counts. A caller takes passes between its runs, so the
// bound follows the machine's speed during them (this VM's bandwidth moves by a third within
// minutes) and can only rise with more passes.
class ReadBandwidth {
public:
    explicit ReadBandwidth(uint64_t cache_bytes);
    // Passes over exactly `bytes` (whole words, at least one), each sweeping it often enough to
    // read 64 MiB: the rate at which data of that size reads back, from whichever level of the
    // cache holds it. Where the cache's size cannot be read, this tells whether a model's bytes
    // decode from the cache (a rate well above the one beyond it) or from memory.
    static ReadBandwidth over_exactly(uint64_t bytes);
    uint64_t buffer_bytes() const { return words_ * sizeof(uint64_t); }
    void measure_pass();
    double bytes_per_second() const { return static_cast<double>(buffer_bytes()) * sweeps_ / best_seconds_; }

private:
    ReadBandwidth(size_t words, int sweeps);
    struct Free {
        void operator()(uint64_t* words) const;
    };
    // All ones; in transparent huge pages where the kernel grants them. With 4 KiB pages this
    // loop read 15-30% less on a Zen 5 VM (33-37 against 25-29 GB/s on one thread), and a bound
    // must be what the memory gives, not what its page tables let through (docs/results.md,
    // "The read bound over huge pages"). The decode's weights gained nothing from huge pages
    // there, so they stay in ordinary ones.
    std::unique_ptr<uint64_t[], Free> data_;
    size_t words_ = 0;
    int sweeps_ = 1;  // over the buffer in one pass
    double best_seconds_ = std::numeric_limits<double>::infinity();
};

}  // namespace dqt
