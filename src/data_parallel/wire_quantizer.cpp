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

int largest_code(int bits) { return bits == 8 ? 127 : 7; }
size_t block_code_bytes(int bits) { return bits == 8 ? kWireBlock : kWireBlock / 2; }
size_t block_bytes(int bits) { return sizeof(float) + block_code_bytes(bits); }
size_t block_count(size_t count) { return (count + kWireBlock - 1) / kWireBlock; }

// absmax / qmax of v[0, n); NaN when a value is not finite. The maximum runs over the bits of
// |v|: for non-negative floats their order as integers is their order as numbers, infinity and
// NaN above every finite value, and an integer maximum vectorises where a float one (with its
// NaN rules) does not.
[[gnu::always_inline]] inline float block_scale(const float* v, size_t n, int qmax) {
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
    return absmax / static_cast<float>(qmax);
}

// codes[i] = the code of v[i]: the nearest integer to v[i] / scale (ties to even) within
// [-qmax, qmax]; all 0 when the scale is 0 or NaN (a NaN scale still decodes to NaN). A code of
// +-1 for |v| below scale / 2, which float rounding of v / scale can give, becomes 0: then v and
// the decoded value are within a factor of 2 of each other whenever the code is not 0, so
// v - decoded is exact (Sterbenz). Branch-free, so that the compiler vectorises it.
[[gnu::always_inline]] inline void quantize_block(const float* v, size_t n, float scale, int qmax, int8_t* codes) {
    if (!(scale > 0.0f)) {
        std::memset(codes, 0, n);
        return;
    }
    // Adding then subtracting 1.5 x 2^23 rounds a float of magnitude below 2^22 to the nearest
    // integer, ties to even (the sum's unit in the last place is 1): std::nearbyint without the
    // library call, exact IEEE arithmetic on every machine.
    constexpr float kRoundingShift = 12582912.0f;
    const float limit = static_cast<float>(qmax);
    int32_t whole[kWireBlock];  // the codes as 32-bit integers: the vectorised conversion's width
    for (size_t i = 0; i < n; ++i) {
        float ratio = v[i] / scale;
        ratio = ratio < -limit ? -limit : ratio;
        ratio = ratio > limit ? limit : ratio;
        const float rounded = (ratio + kRoundingShift) - kRoundingShift;
        const bool below_half = (std::fabs(rounded) == 1.0f) & (2.0f * std::fabs(v[i]) < scale);
        whole[i] = static_cast<int32_t>(below_half ? 0.0f : rounded);
    }
    for (size_t i = 0; i < n; ++i) codes[i] = static_cast<int8_t>(whole[i]);
}

[[gnu::always_inline]] inline float decoded(int q, float scale) { return static_cast<float>(q) * scale; }

// Writes block v[0, n) at `out`: its scale, then the codes of kWireBlock values (zero past n),
// which `codes` also receives. Returns the scale.
[[gnu::always_inline]] inline float encode_block(const float* v, size_t n, int bits, uint8_t* out, int8_t* codes) {
    const int qmax = largest_code(bits);
    const float scale = block_scale(v, n, qmax);
    std::memcpy(out, &scale, sizeof scale);
    uint8_t* packed = out + sizeof scale;
    quantize_block(v, n, scale, qmax, codes);
    std::memset(codes + n, 0, kWireBlock - n);
    if (bits == 8) {
        std::memcpy(packed, codes, kWireBlock);
    } else {
        for (size_t i = 0; i < kWireBlock / 2; ++i) {
            packed[i] = static_cast<uint8_t>((codes[2 * i] & 0xF) | ((codes[2 * i + 1] & 0xF) << 4));
        }
    }
    return scale;
}

// The codes of the block at `in` into codes[0, kWireBlock); returns its scale.
[[gnu::always_inline]] inline float read_block(const uint8_t* in, int bits, int8_t* codes) {
    float scale;
    std::memcpy(&scale, in, sizeof scale);
    const uint8_t* packed = in + sizeof scale;
    if (bits == 8) {
        std::memcpy(codes, packed, kWireBlock);
    } else {
        for (size_t i = 0; i < kWireBlock / 2; ++i) {
            // Sign-extend each nibble.
            codes[2 * i] = static_cast<int8_t>(static_cast<int8_t>(packed[i] << 4) >> 4);
            codes[2 * i + 1] = static_cast<int8_t>(static_cast<int8_t>(packed[i]) >> 4);
        }
    }
    return scale;
}

// One block of each pass below (the body of its parallel loop), compiled for each CPU level:
// every operation is exact IEEE arithmetic, so each level writes the same bits.
DQT_TARGET_CLONES void encode_feedback_block(const float* values, float* residual, size_t n, int bits,
                                             uint8_t* wire) {
    float v[kWireBlock];
    int8_t codes[kWireBlock];
    for (size_t i = 0; i < n; ++i) v[i] = values[i] + residual[i];
    const float scale = encode_block(v, n, bits, wire, codes);
    for (size_t i = 0; i < n; ++i) residual[i] = v[i] - decoded(codes[i], scale);
}

DQT_TARGET_CLONES void encode_difference_block(const float* target, const float* copy, size_t n, int bits,
                                               uint8_t* wire) {
    float v[kWireBlock];
    int8_t codes[kWireBlock];
    for (size_t i = 0; i < n; ++i) v[i] = target[i] - copy[i];
    encode_block(v, n, bits, wire, codes);
}

// out[i] = value i of the block, or out[i] += it.
DQT_TARGET_CLONES void decode_block(const uint8_t* wire, size_t n, int bits, bool accumulate, float* out) {
    int8_t codes[kWireBlock];
    const float scale = read_block(wire, bits, codes);
    if (accumulate) {
        for (size_t i = 0; i < n; ++i) out[i] += decoded(codes[i], scale);
    } else {
        for (size_t i = 0; i < n; ++i) out[i] = decoded(codes[i], scale);
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
