#pragma once
// Integer weight codes: the grid [qn, qp] of a ternary or n-bit format and how codes are
// stored. A weight is W = q / scale with one fp32 scale per tensor (docs/METHOD.md section 2).
//   ternary ("1.58"): q in {-1, 0, 1}, packed 4 per byte: element i in byte i / 4 at bits
//                     2 * (i % 4), stored as q + 1 in {0, 1, 2};
//   n-bit, n = 2..8:  q in [-2^(n-1), 2^(n-1) - 1], one int8 per code.
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/host_device.h"

namespace dqt {

struct CodeGrid {
    int bits = 1;  // 1 means ternary (1.58 bits); otherwise 2..8
    DQT_HOST_DEVICE bool ternary() const { return bits == 1; }
    DQT_HOST_DEVICE int qn() const { return ternary() ? -1 : -(1 << (bits - 1)); }
    DQT_HOST_DEVICE int qp() const { return ternary() ? 1 : (1 << (bits - 1)) - 1; }
    std::string label() const { return ternary() ? "1.58" : std::to_string(bits); }
};

// "1.58" (or "ternary") and "2".."8"; dqt::Error naming the accepted values otherwise.
CodeGrid parse_code_grid(const std::string& bits);

// Bytes that hold `count` codes.
size_t code_bytes(const CodeGrid& grid, size_t count);

DQT_HOST_DEVICE inline int read_code(const uint8_t* codes, const CodeGrid& grid, size_t i) {
    if (grid.ternary()) return ((codes[i / 4] >> (2 * (i % 4))) & 3) - 1;
    return static_cast<int8_t>(codes[i]);
}

// q must lie on the grid.
DQT_HOST_DEVICE inline void write_code(uint8_t* codes, const CodeGrid& grid, size_t i, int q) {
    if (grid.ternary()) {
        const int shift = 2 * static_cast<int>(i % 4);
        codes[i / 4] = static_cast<uint8_t>((codes[i / 4] & ~(3 << shift)) | ((q + 1) << shift));
    } else {
        codes[i] = static_cast<uint8_t>(static_cast<int8_t>(q));
    }
}

// Absmean initial scale: qp / max(mean|W|, 1e-5) (ternary: 1 / mean|W|).
float absmean_code_scale(const CodeGrid& grid, double mean_abs);

// codes[0, count) = clip(round(w * scale), qn, qp), round half to even.
void quantize_nearest(uint8_t* codes, const float* w, size_t count, const CodeGrid& grid, float scale);

// out[i] = q_i / scale. Fast path (a table per packed byte, parallel over elements).
void dequantize_codes(float* out, const uint8_t* codes, size_t count, const CodeGrid& grid, float scale);
// The same, one read_code at a time: the reference the tests compare against.
void dequantize_codes_reference(float* out, const uint8_t* codes, size_t count, const CodeGrid& grid, float scale);

// Largest code of a tensor (qn - 1 for an empty one).
int max_code(const uint8_t* codes, size_t count, const CodeGrid& grid);

}  // namespace dqt
