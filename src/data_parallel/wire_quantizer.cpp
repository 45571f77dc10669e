#include "data_parallel/wire_quantizer.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <limits>

// Built with -ffp-contract=off (CMakeLists.txt): a residual v - q * scale fused into one
// multiply-add would differ from v minus the decoded value the receiver computes.

namespace dqt {

namespace {

int largest_code(int bits) { return bits == 8 ? 127 : 7; }
size_t block_code_bytes(int bits) { return bits == 8 ? kWireBlock : kWireBlock / 2; }
size_t block_bytes(int bits) { return sizeof(float) + block_code_bytes(bits); }
size_t block_count(size_t count) { return (count + kWireBlock - 1) / kWireBlock; }

// absmax / qmax of v[0, n); NaN when a value is not finite.
float block_scale(const float* v, size_t n, int qmax) {
    float absmax = 0.0f;
    bool finite = true;
    for (size_t i = 0; i < n; ++i) {
        const float magnitude = std::fabs(v[i]);
        finite &= magnitude <= FLT_MAX;  // false for inf and NaN
        absmax = std::max(absmax, magnitude);
    }
    return finite ? absmax / static_cast<float>(qmax) : std::numeric_limits<float>::quiet_NaN();
}

// The code of v: the nearest integer to v / scale within [-qmax, qmax], 0 when the scale is 0
// or NaN (the NaN scale still decodes to NaN). A code of +-1 for |v| below scale / 2, which
// float rounding of v / scale can give, becomes 0: then v and the decoded value are within a
// factor of 2 of each other whenever the code is not 0, so v - decoded is exact (Sterbenz).
int code_of(float v, float scale, int qmax) {
    if (!(scale > 0.0f)) return 0;
    const float limit = static_cast<float>(qmax);
    const int q = static_cast<int>(std::min(std::max(std::nearbyint(v / scale), -limit), limit));
    if ((q == 1 || q == -1) && 2.0f * std::fabs(v) < scale) return 0;
    return q;
}

float decoded(int q, float scale) { return static_cast<float>(q) * scale; }

// Writes codes[0, kWireBlock) (zero past n) of block v[0, n) at `out`, after its scale.
// Returns the scale.
float encode_block(const float* v, size_t n, int bits, uint8_t* out, int* codes) {
    const int qmax = largest_code(bits);
    const float scale = block_scale(v, n, qmax);
    std::memcpy(out, &scale, sizeof scale);
    uint8_t* packed = out + sizeof scale;
    for (size_t i = 0; i < kWireBlock; ++i) codes[i] = i < n ? code_of(v[i], scale, qmax) : 0;
    if (bits == 8) {
        for (size_t i = 0; i < kWireBlock; ++i) packed[i] = static_cast<uint8_t>(static_cast<int8_t>(codes[i]));
    } else {
        for (size_t i = 0; i < kWireBlock / 2; ++i) {
            packed[i] = static_cast<uint8_t>((codes[2 * i] & 0xF) | ((codes[2 * i + 1] & 0xF) << 4));
        }
    }
    return scale;
}

// The codes of the block at `in` into codes[0, kWireBlock); returns its scale.
float read_block(const uint8_t* in, int bits, int* codes) {
    float scale;
    std::memcpy(&scale, in, sizeof scale);
    const uint8_t* packed = in + sizeof scale;
    if (bits == 8) {
        for (size_t i = 0; i < kWireBlock; ++i) codes[i] = static_cast<int8_t>(packed[i]);
    } else {
        for (size_t i = 0; i < kWireBlock / 2; ++i) {
            // Sign-extend each nibble.
            codes[2 * i] = static_cast<int8_t>(static_cast<uint8_t>(packed[i] << 4)) >> 4;
            codes[2 * i + 1] = static_cast<int8_t>(packed[i]) >> 4;
        }
    }
    return scale;
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
        float v[kWireBlock];
        int codes[kWireBlock];
        for (size_t i = 0; i < n; ++i) v[i] = values[first + i] + residual[first + i];
        const float scale = encode_block(v, n, bits, wire + offset, codes);
        for (size_t i = 0; i < n; ++i) residual[first + i] = v[i] - decoded(codes[i], scale);
    });
}

void decode(const uint8_t* wire, size_t count, int bits, float* out) {
    for_each_block(count, bits, [&](size_t first, size_t n, size_t offset) {
        int codes[kWireBlock];
        const float scale = read_block(wire + offset, bits, codes);
        for (size_t i = 0; i < n; ++i) out[first + i] = decoded(codes[i], scale);
    });
}

void encode_difference(const float* target, const float* copy, size_t count, int bits, uint8_t* wire) {
    for_each_block(count, bits, [&](size_t first, size_t n, size_t offset) {
        float v[kWireBlock];
        int codes[kWireBlock];
        for (size_t i = 0; i < n; ++i) v[i] = target[first + i] - copy[first + i];
        encode_block(v, n, bits, wire + offset, codes);
    });
}

void add_decoded(const uint8_t* wire, size_t count, int bits, float* copy) {
    for_each_block(count, bits, [&](size_t first, size_t n, size_t offset) {
        int codes[kWireBlock];
        const float scale = read_block(wire + offset, bits, codes);
        for (size_t i = 0; i < n; ++i) copy[first + i] += decoded(codes[i], scale);
    });
}

}  // namespace dqt
