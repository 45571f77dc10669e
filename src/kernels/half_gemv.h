#pragma once
// Activation rows times fp16 weight rows, accumulated in fp32: the decode product of a
// matrix held in fp16 (infer/inference_model.h: a 2B model's 128,256-row head). The weights are
// read once, straight from memory, 2 bytes each, and widened in registers, so the product runs
// at the memory's speed where widening a block into a cache-resident copy and calling gemm
// did not (docs/results.md).
//
// Summation order, the same on every path (the reference spells it): per row, two sets of 16
// lanes; 16-element block b of the row adds into set b % 2 with a fused multiply-add; the two
// sets are added lane by lane, the 16 lanes summed as (l, l+8), (l, l+4), (l, l+2), (l, l+1),
// then the last cols % 16 elements are added one at a time with fused multiply-adds.
#include "core/float16.h"

namespace dqt {

// The instruction-set paths, picked at run time (the build has no -march flag); avx2 needs FMA
// and F16C too. Every path gives the reference's bits.
enum class HalfIsa { reference, avx2, avx512 };
const char* half_isa_name(HalfIsa isa);  // "reference", "avx2", "avx512"
bool half_isa_supported(HalfIsa isa);    // by this CPU's features
HalfIsa best_half_isa();                 // the fastest supported path

// out[j] = sum_k x[k] * weights[j * cols + k] for rows j in [first_row, last_row).
//   x (cols) fp32; weights (rows, cols) fp16 row-major; out indexed by row.
void half_gemv_rows(const float* x, const Float16* weights, int cols, float* out, int first_row, int last_row,
                    HalfIsa isa = best_half_isa());

// Several activation rows against the same weight rows, each weight row read once for all of
// them (a batch of decodes): out[i * out_stride + j] for x rows i in [0, n), x's rows cols
// apart. Every output is half_gemv_rows' for that activation row, bit for bit: the same order.
void half_gemm_rows(const float* x, int n, const Float16* weights, int cols, float* out, int out_stride, int first_row,
                    int last_row, HalfIsa isa = best_half_isa());

// The same order in plain C++ (std::fma): the slow reference, equal bit for bit.
void half_gemv_rows_reference(const float* x, const Float16* weights, int cols, float* out, int first_row,
                              int last_row);

}  // namespace dqt
