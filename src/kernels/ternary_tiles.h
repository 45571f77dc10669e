#pragma once
// Inner kernels of ternary_matmul (kernels/ternary_matmul.h), one per instruction set. A tile
// is up to 4 packed weight rows times up to max_a_rows int8 activation rows; it writes
//   dots[i * 4 + j] = sum over the row of (q + 1)[weight row i] * a[activation row j]
// over `blocks` blocks of 256 weights, exactly in int32. The caller subtracts sum(a).
#include <cstddef>
#include <cstdint>

namespace dqt {

inline constexpr int kTileWeightRows = 4;
inline constexpr int kTileDotsStride = 4;  // dots is (4, 4): row i of the weights, column j of a

using TernaryTileFunction = void (*)(const uint8_t* const* w_rows, int w_count, const int8_t* const* a_rows,
                                     int a_count, int blocks, int32_t* dots);

struct TernaryTileKernel {
    TernaryTileFunction run;
    int max_a_rows;  // 1 to 4
};

// The decode shape (one activation row) on AVX-512 VNNI: weight rows [row_begin, row_end) of
// `rows` packed rows (row_bytes apart) against one int8 row `a` (blocks * 256 values), written
// as out[o] = factor * (dot_o - a_sum). Sixteen weight rows at a time share each activation
// load, and their sums are folded into one vector by a shuffle tree, so short rows (1024
// weights: 4 blocks) do not spend their time in horizontal sums.
void ternary_decode_rows_avx512_vnni(const uint8_t* packed, size_t row_bytes, int row_begin, int row_end,
                                     const int8_t* a, int32_t a_sum, float factor, int blocks, float* out);

TernaryTileKernel ternary_tile_kernel_scalar();
TernaryTileKernel ternary_tile_kernel_avx2();         // needs AVX2
TernaryTileKernel ternary_tile_kernel_avx512_vnni();  // needs AVX-512 F, BW and VNNI

}  // namespace dqt
