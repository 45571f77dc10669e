#include "quant/codes.h"

#include <algorithm>
#include <array>
#include <cmath>

#include "core/error.h"

namespace dqt {

CodeGrid parse_code_grid(const std::string& bits) {
    if (bits == "1.58" || bits == "ternary") return CodeGrid{1};
    for (int n = 2; n <= 8; ++n) {
        if (bits == std::to_string(n)) return CodeGrid{n};
    }
    throw Error("--bits " + bits + " is not supported: use 1.58 (ternary) or an integer width from 2 to 8");
}

size_t code_bytes(const CodeGrid& grid, size_t count) { return grid.ternary() ? (count + 3) / 4 : count; }

float absmean_code_scale(const CodeGrid& grid, double mean_abs) {
    return static_cast<float>(grid.qp() / std::max(mean_abs, 1e-5));
}

void quantize_nearest(uint8_t* codes, const float* w, size_t count, const CodeGrid& grid, float scale) {
    const float qn = static_cast<float>(grid.qn()), qp = static_cast<float>(grid.qp());
    // Whole bytes per iteration so no two threads write the same packed byte.
    const size_t per_byte = grid.ternary() ? 4 : 1;
    const size_t bytes = code_bytes(grid, count);
#pragma omp parallel for schedule(static)
    for (size_t byte = 0; byte < bytes; ++byte) {
        for (size_t i = byte * per_byte; i < std::min(count, (byte + 1) * per_byte); ++i) {
            const float q = std::clamp(std::nearbyint(w[i] * scale), qn, qp);
            write_code(codes, grid, i, static_cast<int>(q));
        }
    }
}

namespace {

// The four values q / scale of every packed ternary byte.
std::array<std::array<float, 4>, 256> ternary_byte_table(float scale) {
    const float levels[4] = {-1.0f / scale, 0.0f, 1.0f / scale, 0.0f};  // code 3 never occurs
    std::array<std::array<float, 4>, 256> table;
    for (int byte = 0; byte < 256; ++byte)
        for (int k = 0; k < 4; ++k) table[byte][k] = levels[(byte >> (2 * k)) & 3];
    return table;
}

}  // namespace

void dequantize_codes(float* out, const uint8_t* codes, size_t count, const CodeGrid& grid, float scale) {
    if (grid.ternary()) {
        const auto table = ternary_byte_table(scale);
        const size_t full_bytes = count / 4;
#pragma omp parallel for schedule(static)
        for (size_t byte = 0; byte < full_bytes; ++byte) {
            const std::array<float, 4>& values = table[codes[byte]];
            for (int k = 0; k < 4; ++k) out[byte * 4 + k] = values[k];
        }
        for (size_t i = full_bytes * 4; i < count; ++i) out[i] = table[codes[full_bytes]][i % 4];
        return;
    }
    std::array<float, 256> table;  // q / scale for every int8 code, indexed by its byte
    for (int byte = 0; byte < 256; ++byte) table[byte] = static_cast<float>(static_cast<int8_t>(byte)) / scale;
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < count; ++i) out[i] = table[codes[i]];
}

void dequantize_codes_reference(float* out, const uint8_t* codes, size_t count, const CodeGrid& grid, float scale) {
    for (size_t i = 0; i < count; ++i) out[i] = static_cast<float>(read_code(codes, grid, i)) / scale;
}

int max_code(const uint8_t* codes, size_t count, const CodeGrid& grid) {
    int best = grid.qn() - 1;
    if (grid.ternary()) {
        // Whole bytes first (a byte holds a +1 when one of its 2-bit fields is 2), then the tail.
        const size_t full_bytes = count / 4;
        for (size_t byte = 0; byte < full_bytes && best < 1; ++byte) {
            for (int k = 0; k < 4; ++k) best = std::max(best, ((codes[byte] >> (2 * k)) & 3) - 1);
        }
        for (size_t i = full_bytes * 4; i < count; ++i) best = std::max(best, read_code(codes, grid, i));
        return best;
    }
    for (size_t i = 0; i < count; ++i) best = std::max(best, read_code(codes, grid, i));
    return best;
}

}  // namespace dqt
