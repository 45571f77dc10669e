#pragma once
// Block quantization of what data-parallel ranks send each other (--compress-gradients,
// --compress-weights). Values travel in blocks of kWireBlock: an fp32 scale (the block's
// absolute maximum / qmax) then integer codes q in [-qmax, qmax], one byte each at 8 bits
// (qmax 127) or two per byte at 4 bits (qmax 7, low nibble first); a value decodes to q * scale.
// Rounding is to nearest, so the wire bytes and what every rank decodes are the same bits run
// to run. What rounding drops stays with the sender (error feedback, or the exact weights of
// the owner) and goes out in a later step: delayed, never lost.
//
// A non-finite value makes its block's scale NaN, so the receiver sees it (the step's gradient
// norm is then not finite, as it would have been uncompressed).
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
