#pragma once
// Counter-based random numbers (Philox4x32-10, Salmon et al. 2011). A draw is a pure
// function of (seed, stream, step, index): no state, so results never depend on the
// thread or rank that computes them, and a resumed run draws exactly the same numbers.
#include <array>
#include <cstdint>

namespace dqt {

// Four 32-bit words from Philox4x32-10 with key (seed) and counter (index, stream, step).
std::array<uint32_t, 4> philox4x32(uint64_t seed, uint32_t stream, uint32_t step, uint64_t index);

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
