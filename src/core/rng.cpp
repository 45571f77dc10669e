#include "core/rng.h"

#include <cmath>

namespace dqt {

std::array<uint32_t, 4> philox4x32(uint64_t seed, uint32_t stream, uint32_t step, uint64_t index) {
    constexpr uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;
    constexpr uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;
    uint32_t c0 = static_cast<uint32_t>(index), c1 = static_cast<uint32_t>(index >> 32), c2 = stream, c3 = step;
    uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
    for (int round = 0; round < 10; ++round) {
        const uint64_t product0 = static_cast<uint64_t>(kMul0) * c0;
        const uint64_t product1 = static_cast<uint64_t>(kMul1) * c2;
        const uint32_t hi0 = static_cast<uint32_t>(product0 >> 32), lo0 = static_cast<uint32_t>(product0);
        const uint32_t hi1 = static_cast<uint32_t>(product1 >> 32), lo1 = static_cast<uint32_t>(product1);
        c0 = hi1 ^ c1 ^ k0;
        c1 = lo1;
        c2 = hi0 ^ c3 ^ k1;
        c3 = lo0;
        k0 += kWeyl0;
        k1 += kWeyl1;
    }
    return {c0, c1, c2, c3};
}

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
