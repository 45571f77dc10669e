#pragma once
// Inner kernels of int8_matmul (kernels/int8_matmul.h), one per instruction set. A tile is
// up to max_w_rows weight rows times up to max_a_rows activation rows, all in registers; over
// columns [0, cols) it writes
//   dots[i * kInt8DotsStride + j] = sum_c q[i][c] * (a[j][c] + activation_bias)
// exactly in int32. The caller subtracts activation_bias * sum_c q[i][c] (non-zero only for
// the VNNI path, whose instruction wants unsigned activations). A kernel may read on into
// the zero padding up to the next multiple of its vector width (at most kInt8RowAlign).
#include <cstdint>

namespace dqt {

inline constexpr int kInt8TileMaxWeightRows = 8;
inline constexpr int kInt8TileMaxActivationRows = 4;
inline constexpr int kInt8DotsStride = kInt8TileMaxActivationRows;  // dots is (weight row i, activation row j)

using Int8TileFunction = void (*)(const int8_t* const* w_rows, int w_count, const int8_t* const* a_rows,
                                  int a_count, int cols, int32_t* dots);

struct Int8TileKernel {
    Int8TileFunction run;
    int max_w_rows;       // 1 to kInt8TileMaxWeightRows
    int max_a_rows;       // 1 to kInt8TileMaxActivationRows
    int activation_bias;  // 0, or 128 for the unsigned-activation form
};

// The tile shape depends on the number of activation rows: one row (decode) or more.
Int8TileKernel int8_tile_kernel_scalar(int activation_rows);
Int8TileKernel int8_tile_kernel_avx2(int activation_rows);         // needs AVX2
Int8TileKernel int8_tile_kernel_avx512_vnni(int activation_rows);  // needs AVX-512 F, BW and VNNI

}  // namespace dqt
