#pragma once
// bfloat16: the top 16 bits of an fp32, rounded to nearest even. Used for Adam state stored
// in 16 bits and for bf16 compute (GEMM operands rounded to bf16, products summed in fp32,
// as bf16 hardware does).
#include <bit>
#include <cstddef>
#include <cstdint>

namespace dqt {

inline uint16_t float_to_bf16(float x) {
    const uint32_t bits = std::bit_cast<uint32_t>(x);
    const uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);
    const uint32_t nearest = (bits + rounding) >> 16;
    const uint32_t quiet_nan = (bits >> 16) | 0x40;  // NaN stays NaN
    // A select, not an early return, so loops converting moments vectorise.
    return static_cast<uint16_t>((bits & 0x7fffffffu) > 0x7f800000u ? quiet_nan : nearest);
}

inline float bf16_to_float(uint16_t x) { return std::bit_cast<float>(static_cast<uint32_t>(x) << 16); }

inline float round_to_bf16(float x) { return bf16_to_float(float_to_bf16(x)); }

// x[i] = round_to_bf16(x[i]) for i < count.
void round_to_bf16_in_place(float* x, size_t count);

}  // namespace dqt
