#pragma once
// Int8 x int8 matrix products for inference of 2..8-bit models. Weights are DQT codes q in
// [-128, 127] (an n-bit grid uses [-2^(n-1), 2^(n-1) - 1]) with one scale per tensor
// (W = q * scale); each activation row is quantized to int8 with absmax by the shared
// quantizer (kernels/int8_rows.h, x ~ a / s). Products are summed exactly in int32:
//   out[r][o] = int8_output_factor(scale, s[r]) * sum_i q[o][i] * a[r][i].
// The tile kernels serve the decode (one row, bound by the bandwidth that streams the
// weights) and small batches; a prompt's many rows go to oneDNN's int8 GEMM (below).
//
// Every instruction-set path returns the reference's floats bit for bit, for any int8
// values on either side (-128 included): the integer sums are exact, and the float epilogue
// is the same expression everywhere.
//
// Layout: plain row-major int8 codes, each row padded with zero codes to
// int8_padded_cols(cols), the same padding as an Int8Rows row, so the kernels run whole
// vectors without tails. Each row also keeps sum(q), which the AVX-512 VNNI path needs: it
// multiplies unsigned (a + 128) with signed q and subtracts 128 * sum(q) afterwards.
#include <cstdint>
#include <vector>

#include "core/memory.h"
#include "kernels/int8_rows.h"
#include "kernels/integer_isa.h"

namespace dqt {

// The widest weight row. Keeps every partial sum inside int32: |q * a| <= 128 * 128 and the
// VNNI path's |q * (a + 128)| <= 128 * 255, times 65536 columns, stay below 2^31.
inline constexpr int kInt8MaxCols = 1 << 16;

// A (rows, cols) int8 weight matrix, packed.
struct Int8Matrix {
    int rows = 0;
    int cols = 0;
    int padded_cols = 0;            // int8_padded_cols(cols)
    float scale = 0.0f;             // W = q * scale
    Array<int8_t> values;           // (rows, padded_cols), zero in the padding, category weights
    std::vector<int32_t> row_sums;  // (rows) sum of q over the row

    const int8_t* row(int r) const { return values.data() + static_cast<size_t>(r) * padded_cols; }
};

// q (rows, cols) -> packed. dqt::Error for cols > kInt8MaxCols or a negative shape.
Int8Matrix pack_int8(const int8_t* q, int rows, int cols, float scale);


// out (x.rows, w.rows) row-major = x . W^T with the given path (default: the best this CPU
// has), parallel (OpenMP) over tiles of weight rows. x.cols must equal w.cols; dqt::Error
// otherwise, and for a path this CPU lacks.
void int8_matmul(const Int8Matrix& w, const Int8Rows& x, float* out);
void int8_matmul(const Int8Matrix& w, const Int8Rows& x, float* out, IntegerIsa isa);

// The same product for weight rows [row_begin, row_end) only, on the calling thread (no
// OpenMP inside), for callers that split the work themselves. out is still the whole
// (x.rows, w.rows) matrix; only out[r * w.rows + o] for o in [row_begin, row_end) is written.
// dqt::Error for a range outside [0, w.rows].
void int8_matmul_rows(const Int8Matrix& w, const Int8Rows& x, float* out, int row_begin, int row_end, IntegerIsa isa);

// Whether a product with this many activation rows of padded_cols goes to oneDNN's int8 GEMM
// (dnnl_gemm_s8s8s32; a prompt's many rows) rather than the tile kernels, on the given path:
// only the AVX-512 VNNI path does (oneDNN's s8 GEMM can saturate 16-bit pair sums without VNNI).
// Its outputs equal the tile kernels' bit for bit: the int32 sums are exact either way.
bool int8_matmul_uses_onednn(int activation_rows, int padded_cols, IntegerIsa isa);

// sums (m, n) = a (m, k) . B exactly in int32 by oneDNN's int8 GEMM (dnnl_gemm_s8s8s32), on the
// calling thread: B is b (n, k) row-major when b_transposed, else b (k, n). Used by the int8 and
// the ternary products (kernels/ternary_matmul.h, kernels/ternary_lookup.h) for many activation
// rows. A oneDNN failure aborts with a message: this runs inside parallel regions, which an
// exception must not leave.
void int8_gemm_exact(bool b_transposed, int m, int n, int k, const int8_t* a, int lda, const int8_t* b, int ldb,
                     int32_t* sums, int ldc);

// The slow reference: weight by weight, int64 sums, the same float epilogue.
void int8_matmul_reference(const Int8Matrix& w, const Int8Rows& x, float* out);

}  // namespace dqt
