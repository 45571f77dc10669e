#pragma once
// Rounding a real-valued grid position x (weight times scale) to an integer code.
#include <array>
#include <cmath>
#include <cstdint>

#include "core/host_device.h"
#include "core/rng.h"

namespace dqt {

enum class Rounding { stochastic, nearest };

// floor(x) + 1 with probability x - floor(x), given u ~ U[0, 1): E[result] = x, so an update
// far smaller than one grid step survives in expectation.
DQT_HOST_DEVICE inline float stochastic_round(float x, float u) {
    const float lower = floorf(x);
    return lower + (u < x - lower ? 1.0f : 0.0f);
}

// Round half to even: the ablation that loses every update smaller than half a grid step.
DQT_HOST_DEVICE inline float nearest_round(float x) { return rintf(x); }

// Four uniforms in [0, 1) for elements 4 * group .. 4 * group + 3 of one tensor at one
// optimizer step. Keyed on (seed, step, tensor id, element index) only: never on thread or
// rank, so the rounding is the same for any thread or process count, and after resume, and
// the same on the GPU (src/cuda/optimizer_update.cu).
DQT_HOST_DEVICE inline std::array<float, 4> rounding_uniforms(uint64_t seed, int64_t step, int tensor_id, uint64_t group) {
    const uint64_t counter = (static_cast<uint64_t>(tensor_id) << 40) | group;  // groups < 2^40
    const std::array<uint32_t, 4> words =
        philox4x32(seed, kStreamRounding, static_cast<uint32_t>(step), counter);
    std::array<float, 4> u;
    for (int k = 0; k < 4; ++k) u[k] = static_cast<float>(words[k] >> 8) * (1.0f / 16777216.0f);
    return u;
}

}  // namespace dqt
