#include "kernels/int8_matmul.h"

#include <oneapi/dnnl/dnnl.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "core/error.h"
#include "kernels/int8_tiles.h"
#include "kernels/integer_matmul_reference.h"

namespace dqt {

namespace {

// Tiles per OpenMP work item: whole tiles, so only the last item has a ragged edge; few, so
// that even a decode's small matrices split evenly over many threads.
constexpr int kTilesPerItem = 2;

// Many activation rows (a prompt chunk) go to oneDNN's int8 GEMM, which blocks them for the
// caches where the tile kernels stream every row past each weight tile: bench_int8_onednn on
// BitNet 2B4T's shapes has the tile kernels 1.04-1.9x faster up to 32 rows, and oneDNN faster
// from about 96 rows at 2560 columns and 40 at 6912 (0.75-0.97x at 128), where the rows'
// activations outgrow a quarter of a 1 MiB L2. Weight rows go to oneDNN in blocks, so its int32
// sums stay in the cache.
constexpr int64_t kOneDnnMinActivationBytes = 256 * 1024;
constexpr int kOneDnnWeightRowBlock = 512;

Int8TileKernel tile_kernel(IntegerIsa isa, int activation_rows) {
    switch (isa) {
        case IntegerIsa::avx2: return int8_tile_kernel_avx2(activation_rows);
        case IntegerIsa::avx512_vnni:
        case IntegerIsa::avx512_amx: return int8_tile_kernel_avx512_vnni(activation_rows);
        case IntegerIsa::scalar: break;
    }
    return int8_tile_kernel_scalar(activation_rows);
}

// Checked without require() in the per-tile entry point: its message string would be built on
// every call.
void check_shapes(const Int8Matrix& w, const Int8Rows& x, IntegerIsa isa, const char* caller) {
    if (x.cols != w.cols || x.padded_cols != w.padded_cols)
        throw Error(std::string(caller) + ": activations have " + std::to_string(x.cols) + " columns (padded " +
                    std::to_string(x.padded_cols) + "), weights " + std::to_string(w.cols) + " (padded " +
                    std::to_string(w.padded_cols) + ")");
    if (!integer_isa_supported(isa)) throw Error(std::string(caller) + ": this CPU lacks " + integer_isa_name(isa));
}

// Weight rows [row_begin, row_end), shapes already checked.
void matmul_rows(const Int8Matrix& w, const Int8Rows& x, float* out, int row_begin, int row_end,
                 const Int8TileKernel& kernel) {
    // Weight tiles outermost: a tile's rows stay in L1 while every activation row passes.
    for (int w_first = row_begin; w_first < row_end; w_first += kernel.max_w_rows) {
        const int w_count = std::min(kernel.max_w_rows, row_end - w_first);
        const int8_t* w_rows[kInt8TileMaxWeightRows];
        for (int i = 0; i < w_count; ++i) w_rows[i] = w.row(w_first + i);
        for (int a_first = 0; a_first < x.rows; a_first += kernel.max_a_rows) {
            const int a_count = std::min(kernel.max_a_rows, x.rows - a_first);
            const int8_t* a_rows[kInt8TileMaxActivationRows];
            for (int j = 0; j < a_count; ++j) a_rows[j] = x.row(a_first + j);
            int32_t dots[kInt8TileMaxWeightRows * kInt8DotsStride];  // (weight row, activation row)
            kernel.run(w_rows, w_count, a_rows, a_count, w.cols, dots);
            for (int j = 0; j < a_count; ++j) {
                const int r = a_first + j;
                const float factor = int8_output_factor(w.scale, x.scales[r]);
                float* out_row = out + static_cast<size_t>(r) * w.rows + w_first;
                for (int i = 0; i < w_count; ++i) {
                    // Exact: the true dot fits int32 (kInt8MaxCols), so does each term.
                    const int32_t dot =
                        dots[i * kInt8DotsStride + j] - kernel.activation_bias * w.row_sums[w_first + i];
                    out_row[i] = factor * static_cast<float>(dot);
                }
            }
        }
    }
}

// Weight rows [row_begin, row_end) through oneDNN on the calling thread (inside a parallel
// region oneDNN runs on the thread that calls it), then the same epilogue as the tile kernels.
void onednn_rows(const Int8Matrix& w, const Int8Rows& x, float* out, int row_begin, int row_end) {
    Array<int32_t> sums(MemCategory::scratch, static_cast<size_t>(x.rows) * kOneDnnWeightRowBlock);
    for (int first = row_begin; first < row_end; first += kOneDnnWeightRowBlock) {
        const int count = std::min(kOneDnnWeightRowBlock, row_end - first);
        // sums (x.rows, count) = a (x.rows, K) . q[first : first + count]^T, exact in int32.
        int8_gemm_exact(true, x.rows, count, w.padded_cols, x.values.data(), x.padded_cols, w.row(first), w.padded_cols,
                        sums.data(), count);
        for (int r = 0; r < x.rows; ++r) {
            const float factor = int8_output_factor(w.scale, x.scales[r]);
            float* out_row = out + static_cast<size_t>(r) * w.rows + first;
            const int32_t* sum_row = sums.data() + static_cast<size_t>(r) * count;
            for (int i = 0; i < count; ++i) out_row[i] = factor * static_cast<float>(sum_row[i]);
        }
    }
}

}  // namespace

void int8_gemm_exact(bool b_transposed, int m, int n, int k, const int8_t* a, int lda, const int8_t* b, int ldb,
                     int32_t* sums, int ldc) {
    const int32_t no_offset = 0;
    const dnnl_status_t status = dnnl_gemm_s8s8s32('N', b_transposed ? 'T' : 'N', 'F', m, n, k, 1.0f, a, lda, 0, b, ldb,
                                                   0, 0.0f, sums, ldc, &no_offset);
    if (status != dnnl_success) {
        std::fprintf(stderr, "dqt: internal error: dnnl_gemm_s8s8s32 failed with status %d\n", static_cast<int>(status));
        std::abort();
    }
}

bool int8_matmul_uses_onednn(int activation_rows, int padded_cols, IntegerIsa isa) {
    return runs_avx512_vnni(isa) &&
           static_cast<int64_t>(activation_rows) * padded_cols >= kOneDnnMinActivationBytes;
}

Int8Matrix pack_int8(const int8_t* q, int rows, int cols, float scale) {
    require(rows >= 0 && cols >= 0, "pack_int8: negative shape " + std::to_string(rows) + " x " + std::to_string(cols));
    require(cols <= kInt8MaxCols, "pack_int8: " + std::to_string(cols) + " columns, the int8 kernels take at most " +
                                      std::to_string(kInt8MaxCols) + " (int32 sums)");
    Int8Matrix w;
    w.rows = rows;
    w.cols = cols;
    w.padded_cols = int8_padded_cols(cols);
    w.scale = scale;
    w.values = Array<int8_t>(MemCategory::weights, static_cast<size_t>(rows) * w.padded_cols);  // zeroed padding
    w.row_sums.assign(rows, 0);
    for (int r = 0; r < rows; ++r) {
        const int8_t* source = q + static_cast<size_t>(r) * cols;
        std::memcpy(w.values.data() + static_cast<size_t>(r) * w.padded_cols, source, static_cast<size_t>(cols));
        int32_t sum = 0;
        for (int c = 0; c < cols; ++c) sum += source[c];
        w.row_sums[r] = sum;
    }
    return w;
}

void int8_matmul(const Int8Matrix& w, const Int8Rows& x, float* out) { int8_matmul(w, x, out, best_integer_isa()); }

void int8_matmul(const Int8Matrix& w, const Int8Rows& x, float* out, IntegerIsa isa) {
    // Checked here, before the parallel region, which an exception must not leave: the
    // per-item calls then cannot fail.
    check_shapes(w, x, isa, "int8_matmul");
    const int item_rows = int8_matmul_uses_onednn(x.rows, x.padded_cols, isa)
                              ? kOneDnnWeightRowBlock
                              : kTilesPerItem * tile_kernel(isa, x.rows).max_w_rows;
    const int items = (w.rows + item_rows - 1) / item_rows;
#pragma omp parallel for schedule(static)
    for (int t = 0; t < items; ++t)
        int8_matmul_rows(w, x, out, t * item_rows, std::min(w.rows, (t + 1) * item_rows), isa);
}

void int8_matmul_rows(const Int8Matrix& w, const Int8Rows& x, float* out, int row_begin, int row_end, IntegerIsa isa) {
    check_shapes(w, x, isa, "int8_matmul_rows");
    if (row_begin < 0 || row_begin > row_end || row_end > w.rows)
        throw Error("int8_matmul_rows: weight rows [" + std::to_string(row_begin) + ", " + std::to_string(row_end) +
                    ") outside [0, " + std::to_string(w.rows) + ")");
    if (int8_matmul_uses_onednn(x.rows, x.padded_cols, isa)) {
        onednn_rows(w, x, out, row_begin, row_end);
    } else {
        matmul_rows(w, x, out, row_begin, row_end, tile_kernel(isa, x.rows));
    }
}

void int8_matmul_reference(const Int8Matrix& w, const Int8Rows& x, float* out) {
    integer_matmul_reference(
        "int8_matmul_reference", w.rows, w.cols, w.scale, [&w](int o, int c) { return w.row(o)[c]; }, x, out);
}

}  // namespace dqt
