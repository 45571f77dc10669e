#include "core/rng.h"

#include <cmath>

namespace dqt {

float uniform01(uint64_t seed, uint32_t stream, uint32_t step, uint64_t index) {
    return static_cast<float>(philox4x32(seed, stream, step, index)[0] >> 8) * (1.0f / 16777216.0f);
}

uint64_t random_u64(uint64_t seed, uint32_t stream, uint32_t step, uint64_t index) {
    const auto words = philox4x32(seed, stream, step, index);
    return (static_cast<uint64_t>(words[0]) << 32) | words[1];
}

float normal01(uint64_t seed, uint32_t stream, uint32_t step, uint64_t index) {
    const auto words = philox4x32(seed, stream, step, index);
    // u1 in (0, 1] so log is finite; u2 in [0, 1).
    const double u1 = (static_cast<double>(words[0]) + 1.0) / 4294967296.0;
    const double u2 = static_cast<double>(words[1]) / 4294967296.0;
    return static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2));
}

}  // namespace dqt
