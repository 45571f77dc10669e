#include "data_parallel/wire_quantizer.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "kernels/vecmath.h"

// Built with -ffp-contract=off (CMakeLists.txt): a residual v - q * scale fused into one
// multiply-add would differ from v minus the decoded value the receiver computes.

namespace dqt {

namespace {

size_t block_code_bytes(int bits) { return bits == 8 ? kWireBlock : kWireBlock / 2; }
size_t block_bytes(int bits) { return sizeof(float) + block_code_bytes(bits); }
size_t block_count(size_t count) { return (count + kWireBlock - 1) / kWireBlock; }

// A block whose absolute maximum is below this sends zeros (its values stay with the sender):
// then every decoded value is a normal float, which the exactness argument below needs.
constexpr float kSmallestAbsmax = 0x1p-100f;

// The block's absolute maximum; NaN when a value is not finite. The maximum runs over the bits
// of |v|: for non-negative floats their order as integers is their order as numbers, infinity
// and NaN above every finite value, and an integer maximum vectorises where a float one (with
// its NaN rules) does not.
[[gnu::always_inline]] inline float block_absmax(const float* v, size_t n) {
    constexpr uint32_t kMagnitudeBits = 0x7FFFFFFFu, kInfinityBits = 0x7F800000u;
    uint32_t largest = 0;
    for (size_t i = 0; i < n; ++i) {
        uint32_t bits;
        std::memcpy(&bits, v + i, sizeof bits);
        bits &= kMagnitudeBits;
        largest = bits > largest ? bits : largest;
    }
    if (largest >= kInfinityBits) return std::numeric_limits<float>::quiet_NaN();
    float absmax;
    std::memcpy(&absmax, &largest, sizeof absmax);
    return absmax;
}

// 8 bits, uniform: levels[i] = the nearest integer to v[i] / scale (ties to even) within
// [-127, 127]. A level of +-1 for |v| below scale / 2, which float rounding of v / scale can
// give, becomes 0, so that v and the decoded value are within a factor of 2 of each other
// whenever the level is not 0: then v - decoded is exact (Sterbenz). Branch-free, so that the
// compiler vectorises it.
[[gnu::always_inline]] inline void uniform8_levels(const float* v, size_t n, float scale, float* levels) {
    // Adding then subtracting 1.5 x 2^23 rounds a float of magnitude below 2^22 to the nearest
    // integer, ties to even (the sum's unit in the last place is 1): std::nearbyint without the
    // library call, exact IEEE arithmetic on every machine.
    constexpr float kRoundingShift = 12582912.0f, kLimit = 127.0f;
    for (size_t i = 0; i < n; ++i) {
        float ratio = v[i] / scale;
        ratio = ratio < -kLimit ? -kLimit : ratio;
        ratio = ratio > kLimit ? kLimit : ratio;
        const float rounded = (ratio + kRoundingShift) - kRoundingShift;
        const bool below_half = (std::fabs(rounded) == 1.0f) & (2.0f * std::fabs(v[i]) < scale);
        levels[i] = below_half ? 0.0f : rounded;
    }
}

// 4 bits, logarithmic: a sign and a magnitude k in 0..7, value +-2^(k-7) times the block's
// absmax for k >= 1, 0 for k = 0: seven powers of two from absmax / 64 to absmax. Each |v| goes
// to the nearest of 0 and those (ties up); 0 only below absmax / 128, so every value within 2^7
// of the block's largest travels each step with at most a third of relative error, where a
// uniform 4-bit grid sends 0 for everything below absmax / 14 (measured: gradients of ternary
// dqt then arrive in bursts, docs/data-parallel.md). Neighbouring levels are a factor of 2
// apart, so v - decoded is exact here too. The nibble holds k, plus 8 for a negative value.
inline constexpr float kLog4Levels[16] = {0.0f,        0x1p-6f,  0x1p-5f,  0x1p-4f,  0x1p-3f,  0x1p-2f,
                                          0x1p-1f,     1.0f,     0.0f,     -0x1p-6f, -0x1p-5f, -0x1p-4f,
                                          -0x1p-3f,    -0x1p-2f, -0x1p-1f, -1.0f};

[[gnu::always_inline]] inline void log4_nibbles(const float* v, size_t n, float absmax, uint8_t* nibbles) {
    const float zero_below = absmax * 0x1p-7f;  // exact: a power of two times a normal float
    for (size_t i = 0; i < n; ++i) {
        const float magnitude = std::fabs(v[i]);
        const float ratio = magnitude / absmax;  // in [0, 1]
        uint32_t bits;
        std::memcpy(&bits, &ratio, sizeof bits);
        // ratio in [2^e, 2^(e+1)): e from the exponent field; up to 2^(e+1) from 1.5 x 2^e.
        int32_t k = static_cast<int32_t>(bits >> 23) - 127 + 7 + static_cast<int32_t>((bits >> 22) & 1);
        k = k < 1 ? 1 : k;
        k = k > 7 ? 7 : k;
        k = magnitude > zero_below ? k : 0;
        const int32_t sign = (v[i] < 0.0f) & (k != 0) ? 8 : 0;
        nibbles[i] = static_cast<uint8_t>(k | sign);
    }
}

// Writes block v[0, n) at `out`: its scale, then the codes of kWireBlock values (zero past n).
// levels[i] (i < n) receives the multiplier of the scale that value i decodes to. Returns the scale.
[[gnu::always_inline]] inline float encode_block(const float* v, size_t n, int bits, uint8_t* out, float* levels) {
    const float absmax = block_absmax(v, n);
    const bool sends = absmax >= kSmallestAbsmax;  // false for NaN as well
    uint8_t* packed = out + sizeof(float);
    float scale;
    if (bits == 8) {
        scale = absmax / 127.0f;
        if (sends) {
            uniform8_levels(v, n, scale, levels);
        } else {
            std::fill_n(levels, n, 0.0f);
        }
        for (size_t i = 0; i < n; ++i) packed[i] = static_cast<uint8_t>(static_cast<int8_t>(levels[i]));
        std::memset(packed + n, 0, kWireBlock - n);
    } else {
        scale = absmax;
        uint8_t nibbles[kWireBlock] = {};
        if (sends) log4_nibbles(v, n, absmax, nibbles);
        for (size_t i = 0; i < n; ++i) levels[i] = kLog4Levels[nibbles[i]];
        for (size_t i = 0; i < kWireBlock / 2; ++i) {
            packed[i] = static_cast<uint8_t>(nibbles[2 * i] | (nibbles[2 * i + 1] << 4));
        }
    }
    std::memcpy(out, &scale, sizeof scale);
    return scale;
}

// The multipliers of the block at `in` into levels[0, n); returns its scale.
[[gnu::always_inline]] inline float read_block(const uint8_t* in, size_t n, int bits, float* levels) {
    float scale;
    std::memcpy(&scale, in, sizeof scale);
    const uint8_t* packed = in + sizeof scale;
    if (bits == 8) {
        for (size_t i = 0; i < n; ++i) levels[i] = static_cast<float>(static_cast<int8_t>(packed[i]));
    } else {
        for (size_t i = 0; i < n; ++i) levels[i] = kLog4Levels[(packed[i / 2] >> (4 * (i % 2))) & 0xF];
    }
    return scale;
}

// One block of each pass below (the body of its parallel loop), compiled for each CPU level:
// every operation is exact IEEE arithmetic, so each level writes the same bits. A value decodes
// to scale x level, on the sender and on the receivers alike.
DQT_TARGET_CLONES void encode_feedback_block(const float* values, float* residual, size_t n, int bits,
                                             uint8_t* wire) {
    float v[kWireBlock], levels[kWireBlock];
    for (size_t i = 0; i < n; ++i) v[i] = values[i] + residual[i];
    const float scale = encode_block(v, n, bits, wire, levels);
    for (size_t i = 0; i < n; ++i) residual[i] = v[i] - scale * levels[i];
}

DQT_TARGET_CLONES void encode_difference_block(const float* target, const float* copy, size_t n, int bits,
                                               uint8_t* wire) {
    float v[kWireBlock], levels[kWireBlock];
    for (size_t i = 0; i < n; ++i) v[i] = target[i] - copy[i];
    encode_block(v, n, bits, wire, levels);
}

// out[i] = value i of the block, or out[i] += it.
DQT_TARGET_CLONES void decode_block(const uint8_t* wire, size_t n, int bits, bool accumulate, float* out) {
    float levels[kWireBlock];
    const float scale = read_block(wire, n, bits, levels);
    if (accumulate) {
        for (size_t i = 0; i < n; ++i) out[i] += scale * levels[i];
    } else {
        for (size_t i = 0; i < n; ++i) out[i] = scale * levels[i];
    }
}

// body(first, n, block_wire) for each block of `count` values, in parallel.
template <typename Body>
void for_each_block(size_t count, int bits, Body&& body) {
    const size_t blocks = block_count(count), stride = block_bytes(bits);
#pragma omp parallel for schedule(static)
    for (size_t block = 0; block < blocks; ++block) {
        const size_t first = block * kWireBlock;
        body(first, std::min(kWireBlock, count - first), block * stride);
    }
}

}  // namespace

size_t wire_bytes(size_t count, int bits) { return block_count(count) * block_bytes(bits); }

void encode_with_feedback(const float* values, float* residual, size_t count, int bits, uint8_t* wire) {
    for_each_block(count, bits, [&](size_t first, size_t n, size_t offset) {
        encode_feedback_block(values + first, residual + first, n, bits, wire + offset);
    });
}

void decode(const uint8_t* wire, size_t count, int bits, float* out) {
    for_each_block(count, bits,
                   [&](size_t first, size_t n, size_t offset) { decode_block(wire + offset, n, bits, false, out + first); });
}

void encode_difference(const float* target, const float* copy, size_t count, int bits, uint8_t* wire) {
    for_each_block(count, bits, [&](size_t first, size_t n, size_t offset) {
        encode_difference_block(target + first, copy + first, n, bits, wire + offset);
    });
}

void add_decoded(const uint8_t* wire, size_t count, int bits, float* copy) {
    for_each_block(count, bits,
                   [&](size_t first, size_t n, size_t offset) { decode_block(wire + offset, n, bits, true, copy + first); });
}

}  // namespace dqt
