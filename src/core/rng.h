#pragma once
// Counter-based random numbers (Philox4x32-10, Salmon et al. 2011). A draw is a pure
// function of (seed, stream, step, index): no state, so results never depend on the
// thread or rank that computes them, and a resumed run draws exactly the same numbers.
#include <array>
#include <cstdint>

#include "core/host_device.h"

namespace dqt {

// Four 32-bit words from Philox4x32-10 with key (seed) and counter (index, stream, step).
// Inline: hot loops (stochastic rounding) draw from it and may vectorise across draws; the
// CUDA update kernel (src/cuda/) calls the same function.
DQT_HOST_DEVICE inline std::array<uint32_t, 4> philox4x32(uint64_t seed, uint32_t stream, uint32_t step, uint64_t index) {
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

// Uniform float in [0, 1) with 24 random bits, keyed on (seed, stream, step, index).
float uniform01(uint64_t seed, uint32_t stream, uint32_t step, uint64_t index);

// Uniform 64-bit integer keyed on (seed, stream, step, index).
uint64_t random_u64(uint64_t seed, uint32_t stream, uint32_t step, uint64_t index);

// Standard normal (Box-Muller on one Philox block), keyed on (seed, stream, step, index).
float normal01(uint64_t seed, uint32_t stream, uint32_t step, uint64_t index);

// Streams: distinct purposes never share random numbers.
enum RngStream : uint32_t {
    kStreamInit = 1,       // parameter initialisation; index = element, step = tensor id
    kStreamBatch = 2,      // batch window offsets; step = optimizer step
    kStreamSample = 3,     // generation sampling; step = token position
    kStreamRounding = 4,   // stochastic rounding (later issues)
};

}  // namespace dqt
