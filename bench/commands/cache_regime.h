#pragma once
// Whether a model's bytes read per token (or per step) come from the last-level cache or from
// memory: by the cache's size where sysfs gives it; where it does not (some VMs, whose CPUID
// gives the whole package's L3 at best), measured: data of that size reading back at more than
// 1.5x the rate beyond the cache sits in a cache. `dqt bench generate`, `bench serve` and
// `bench bandwidth`.
#include <cstdint>

#include "kernels/read_bandwidth.h"

namespace dqt {

// The best rate of `passes` passes over bandwidth's buffer, bytes/s.
inline double best_read_rate(ReadBandwidth bandwidth, int passes) {
    for (int pass = 0; pass < passes; ++pass) bandwidth.measure_pass();
    return bandwidth.bytes_per_second();
}

struct CacheRegime {
    uint64_t cache_bytes;  // 0: unreadable
    double bandwidth;      // beyond the cache, bytes/s

    bool holds(double bytes, double* measured_rate) const {
        if (cache_bytes > 0) return bytes <= static_cast<double>(cache_bytes);
        *measured_rate = best_read_rate(ReadBandwidth::over_exactly(static_cast<uint64_t>(bytes)), 5);
        return *measured_rate > 1.5 * bandwidth;
    }
};

}  // namespace dqt
