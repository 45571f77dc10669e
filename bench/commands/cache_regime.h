#pragma once
// Whether a model's bytes read per token (or per step) come from the last-level cache or from
// memory: by the cache's size where sysfs gives it; where it does not (some VMs, whose CPUID
// gives the whole package's L3 at best), measured: data of that size reading back at more than
// 1.5x the rate beyond the cache sits in a cache. `dqt bench generate` and `bench serve`.
#include <cstdint>

#include "kernels/read_bandwidth.h"

namespace dqt {

struct CacheRegime {
    uint64_t cache_bytes;  // 0: unreadable
    double bandwidth;      // beyond the cache, bytes/s

    bool holds(double bytes, double* measured_rate) const {
        if (cache_bytes > 0) return bytes <= static_cast<double>(cache_bytes);
        ReadBandwidth at_size = ReadBandwidth::over_exactly(static_cast<uint64_t>(bytes));
        for (int pass = 0; pass < 5; ++pass) at_size.measure_pass();
        *measured_rate = at_size.bytes_per_second();
        return *measured_rate > 1.5 * bandwidth;
    }
};

}  // namespace dqt
