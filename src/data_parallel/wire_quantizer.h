#pragma once
// Block quantization of what data-parallel ranks send each other (--compress-gradients,
// --compress-weights). Values travel in blocks of kWireBlock, each an fp32 scale and one code
// per value, a value decoding to scale x level(code):
//  - 8 bits, uniform: scale = the block's absolute maximum / 127, one int8 code q in
//    [-127, 127] per value, level q (260 bytes per 256 values, 3.94x less than fp32);
//  - 4 bits, logarithmic: scale = the block's absolute maximum, one nibble per value (low
//    nibble first): a magnitude k in 0..7 plus 8 for a negative value, level +-2^(k-7) for
//    k >= 1 and 0 for k = 0 (132 bytes per 256 values, 7.76x less).
// Each value goes to the nearest level, so the wire bytes and what every rank decodes are the
// same bits run to run. What rounding drops stays with the sender (error feedback, or the exact
// weights of the owner) and goes out in a later step: delayed, never lost.
//
// A non-finite value makes its block's scale NaN, so the receiver sees it (the step's gradient
// norm is then not finite, as it would have been uncompressed). A block whose largest value is
// below 2^-100 sends zeros.
#include <cstddef>
#include <cstdint>

namespace dqt {

inline constexpr size_t kWireBlock = 256;

// Bytes that `count` values take on the wire at `bits` (8 or 4); a last partial block is padded.
size_t wire_bytes(size_t count, int bits);

// Error feedback: encodes v = values + residual into `wire` and leaves in `residual` what the
// wire misses, exactly: decode(wire)[i] + residual[i] == v[i] in float arithmetic.
void encode_with_feedback(const float* values, float* residual, size_t count, int bits, uint8_t* wire);
// out[i] = value i of `wire`.
void decode(const uint8_t* wire, size_t count, int bits, float* out);
// Encodes target - copy (what a copy of target still misses) into `wire`.
void encode_difference(const float* target, const float* copy, size_t count, int bits, uint8_t* wire);
// copy[i] += value i of `wire`: how every rank, the sender included, advances its copy.
void add_decoded(const uint8_t* wire, size_t count, int bits, float* copy);

}  // namespace dqt
