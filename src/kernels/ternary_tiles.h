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

// The decode and small-batch shapes on AVX-512 VNNI: weight rows [row_begin, row_end) of
// packed rows (row_bytes apart) against a_rows int8 rows a (a_stride apart, blocks * 256
// values each), written as out[r * out_stride + o] = factors[r] * (dot(o, r) - a_sums[r]).
// Activations are interleaved once per call; groups of 1, 3 or 4 activation rows run against
// 16 / group weight rows at a time, and the tile's sums fold into one vector. A group of one
// row (memory-bound) reads each weight row whole, in address order; larger groups
// (compute-bound) pass the tile block by block, each block's codes unpacked once for the group.
inline constexpr int kSmallBatchChunkRows = 64;  // weight rows a group pass covers before the next group
inline constexpr int kSmallBatchMaxRows = 16;    // ternary_matmul uses this kernel up to here
void ternary_small_batch_rows_avx512_vnni(const uint8_t* packed, size_t row_bytes, int row_begin, int row_end,
                                          const int8_t* a, size_t a_stride, int a_rows, const int32_t* a_sums,
                                          const float* factors, int blocks, float* out, size_t out_stride);

// The same small batches on Intel's AMX tiles (kernels/ternary_amx.cpp), operands and outputs as
// ternary_small_batch_rows_avx512_vnni: 32 weight rows a pass, each block's codes unpacked once
// by AVX-512 into an L1 buffer the tiles load, multiplied by tdpbusd 16 weight rows x a_rows
// activation rows at a time. Needs IntegerIsa::avx512_amx (kernels/integer_isa.h).
// ternary_matmul uses it from kAmxMinRows to kSmallBatchMaxRows: on one thread of the 2B shape
// the tiles ran 5 rows 1.33x faster than the VNNI kernel, 4 rows only 1.03x (bench_ternary_batch).
inline constexpr int kAmxMinRows = 5;
void ternary_small_batch_rows_amx(const uint8_t* packed, size_t row_bytes, int row_begin, int row_end,
                                  const int8_t* a, size_t a_stride, int a_rows, const int32_t* a_sums,
                                  const float* factors, int blocks, float* out, size_t out_stride);

// Decode and small batches on AVX2 (a_rows activation rows a_stride apart, blocks * 256 values
// each), as ternary_small_batch_rows_avx512_vnni: weight rows [row_begin, row_end) of packed
// rows (row_bytes apart), out[i * out_stride + o] = factors[i] * (dot_i(o) - a_sums[i]). Each
// weight row is read whole, in address order, its stream prefetched into L2, and each of its
// blocks unpacked once for every four activation rows.
void ternary_small_batch_rows_avx2(const uint8_t* packed, size_t row_bytes, int row_begin, int row_end,
                                   const int8_t* a, size_t a_stride, int a_rows, const int32_t* a_sums,
                                   const float* factors, int blocks, float* out, size_t out_stride);

// A prompt's many activation rows on AVX2, with the operands and outputs of
// ternary_small_batch_rows_avx2: weight rows unpacked a chunk at a time into (q + 1) bytes,
// then tiles of 2 weight rows x 4 activation rows with one maddubs and one add per pair and 32
// weights (kernels/ternary_tiles.cpp says why).
void ternary_prompt_rows_avx2(const uint8_t* packed, size_t row_bytes, int row_begin, int row_end, const int8_t* a,
                              size_t a_stride, int a_rows, const int32_t* a_sums, const float* factors, int blocks,
                              float* out, size_t out_stride);

// Packed rows [first_row, first_row + count) (row_bytes apart, blocks of 256 weights each) as
// int8 codes q in {-1, 0, 1}: codes (count, blocks * 256) row-major. AVX2 code: the VNNI
// prompt path hands them to oneDNN's int8 GEMM (kernels/ternary_matmul.cpp).
void ternary_unpack_rows_avx2(const uint8_t* packed, size_t row_bytes, int first_row, int count, int blocks,
                              int8_t* codes);

TernaryTileKernel ternary_tile_kernel_scalar();
TernaryTileKernel ternary_tile_kernel_avx512_vnni();  // needs AVX-512 F, BW and VNNI

}  // namespace dqt
