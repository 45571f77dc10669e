#pragma once
// Ternary x int8 matrix products for inference (BitNet b1.58 style). Weights are q in
// {-1, 0, 1} with one scale per tensor (W = q * gamma); each activation row is quantized to
// int8 with absmax (x ~ a / s, s = 127 / max|x|, as in quant/activation_quant.h); products
// are summed exactly in int32 (activations from kernels/int8_rows.h, the quantizer training
// uses too):
//   out[r][o] = int8_output_factor(gamma, s[r]) * sum_i q[o][i] * a[r][i].
// One code serves the prompt (many rows) and the decode (one row) shapes.
//
// Packed layout: llama.cpp's TQ2_0 codes without its per-block fp16 scale, so a GGUF export
// copies them. Each row is cut into blocks of 256 weights, 64 bytes each, in two 32-byte
// halves; byte m of half h holds weight 128h + 32n + m at bits 2n (n = 0..3) as q + 1 in
// {0, 1, 2}. Rows are padded with zero weights to a multiple of 256 columns.
//
// The kernels multiply the unsigned codes q + 1 with the signed a (the form of AVX2's
// maddubs and AVX-512 VNNI's dpbusd) and subtract sum(a) once per row. A prompt's many rows
// (where kernels/int8_matmul.h's rule sends int8 rows to oneDNN) unpack the weights to int8 q
// a chunk of rows at a time for oneDNN's int8 GEMM instead.
#include <cstdint>
#include <vector>

#include "core/memory.h"
#include "kernels/int8_rows.h"
#include "kernels/integer_isa.h"

namespace dqt {

inline constexpr int kTernaryBlock = 256;       // weights per block
inline constexpr int kTernaryBlockBytes = 64;   // packed bytes per block

inline int ternary_padded_cols(int cols) { return (cols + kTernaryBlock - 1) / kTernaryBlock * kTernaryBlock; }

// A (rows, cols) ternary weight matrix, packed.
struct TernaryMatrix {
    int rows = 0;
    int cols = 0;
    int padded_cols = 0;    // cols rounded up to kTernaryBlock
    float gamma = 0.0f;     // W = q * gamma
    Array<uint8_t> packed;  // (rows, padded_cols / 4), category weights

    size_t row_bytes() const { return static_cast<size_t>(padded_cols) / 4; }
    const uint8_t* row(int r) const { return packed.data() + static_cast<size_t>(r) * row_bytes(); }
};

// Where weight `col` of a packed row sits: byte index in the row and bit shift.
struct TernaryCodeSlot {
    size_t byte;
    int shift;
};
TernaryCodeSlot ternary_code_slot(int col);

// q (rows, cols), values in {-1, 0, 1}; dqt::Error for any other value.
TernaryMatrix pack_ternary(const int8_t* q, int rows, int cols, float gamma);
// The code of one weight, read back from the packed layout.
int ternary_code_at(const TernaryMatrix& w, int row, int col);


// out (x.rows, w.rows) = x . W^T with the given path (default: the best this CPU has).
// x.cols must equal w.cols; dqt::Error for a path this CPU lacks.
void ternary_matmul(const TernaryMatrix& w, const Int8Rows& x, float* out);
void ternary_matmul(const TernaryMatrix& w, const Int8Rows& x, float* out, IntegerIsa isa);
// Weight rows [row_begin, row_end) only, on the calling thread (for callers that split the
// work themselves): out (x.rows, w.rows) as ternary_matmul's, only columns [row_begin,
// row_end) written. dqt::Error as ternary_matmul.
void ternary_matmul_rows(const TernaryMatrix& w, const Int8Rows& x, float* out, int row_begin, int row_end,
                         IntegerIsa isa);

// The slow reference: weight by weight through ternary_code_at, int64 sums.
void ternary_matmul_reference(const TernaryMatrix& w, const Int8Rows& x, float* out);

}  // namespace dqt
