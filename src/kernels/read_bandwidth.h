#pragma once
// This machine's read bandwidth beyond the cache: the limit a memory-bound kernel (one-row
// decode) is measured against, in the same process as the kernel (`dqt bench generate`,
// bench_ternary_batch).
#include <cstdint>
#include <limits>
#include <vector>

namespace dqt {

// Passes over a buffer of 4 times the last-level cache and at least 512 MiB (so that no pass
// is served from the cache), with the calling OpenMP team's threads, each summing its own
// contiguous share; the best pass counts. A caller takes passes between its runs, so the
// bound follows the machine's speed during them (this VM's bandwidth moves by a third within
// minutes) and can only rise with more passes.
class ReadBandwidth {
public:
    explicit ReadBandwidth(uint64_t cache_bytes);
    uint64_t buffer_bytes() const { return words_.size() * sizeof(uint64_t); }
    void measure_pass();
    double bytes_per_second() const { return static_cast<double>(buffer_bytes()) / best_seconds_; }

private:
    std::vector<uint64_t> words_;  // all ones
    double best_seconds_ = std::numeric_limits<double>::infinity();
};

}  // namespace dqt
