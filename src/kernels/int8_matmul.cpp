// TEMPORARY scalar stand-in until the int8 kernel branch lands (not to be committed).
#include "kernels/int8_matmul.h"
#include <cstring>
#include "core/error.h"
namespace dqt {
Int8Matrix pack_int8(const int8_t* q, int rows, int cols, float scale) {
    Int8Matrix w; w.rows = rows; w.cols = cols; w.padded_cols = int8_padded_cols(cols); w.scale = scale;
    w.values = Array<int8_t>(MemCategory::weights, static_cast<size_t>(rows) * w.padded_cols);
    w.row_sums.assign(rows, 0);
    for (int r = 0; r < rows; ++r) for (int c = 0; c < cols; ++c) { w.values[static_cast<size_t>(r) * w.padded_cols + c] = q[static_cast<size_t>(r) * cols + c]; w.row_sums[r] += q[static_cast<size_t>(r) * cols + c]; }
    return w;
}
const char* int8_isa_name(Int8Isa) { return "scalar"; }
bool int8_isa_supported(Int8Isa isa) { return isa == Int8Isa::scalar; }
Int8Isa best_int8_isa() { return Int8Isa::scalar; }
void int8_matmul_rows(const Int8Matrix& w, const Int8Rows& x, float* out, int row_begin, int row_end, Int8Isa) {
    for (int r = 0; r < x.rows; ++r) for (int o = row_begin; o < row_end; ++o) { int32_t d = 0; for (int c = 0; c < w.cols; ++c) d += w.row(o)[c] * x.row(r)[c]; out[static_cast<size_t>(r) * w.rows + o] = int8_output_factor(w.scale, x.scales[r]) * static_cast<float>(d); }
}
void int8_matmul(const Int8Matrix& w, const Int8Rows& x, float* out, Int8Isa isa) { int8_matmul_rows(w, x, out, 0, w.rows, isa); }
void int8_matmul(const Int8Matrix& w, const Int8Rows& x, float* out) { int8_matmul_rows(w, x, out, 0, w.rows, Int8Isa::scalar); }
void int8_matmul_reference(const Int8Matrix& w, const Int8Rows& x, float* out) { int8_matmul_rows(w, x, out, 0, w.rows, Int8Isa::scalar); }
}
