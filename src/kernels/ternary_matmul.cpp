#include "kernels/ternary_matmul.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/error.h"
#include "kernels/int8_matmul.h"
#include "kernels/integer_matmul_reference.h"
#include "kernels/ternary_tiles.h"
#include "kernels/vecmath.h"

namespace dqt {

namespace {

// Checked with if, not require(): the message would be built on every call.
void check_operands(const TernaryMatrix& w, const Int8Rows& x, IntegerIsa isa) {
    if (x.cols != w.cols)
        throw Error("ternary_matmul: activations have " + std::to_string(x.cols) + " columns, weights " +
                    std::to_string(w.cols));
    if (!integer_isa_supported(isa)) throw Error(std::string("ternary_matmul: this CPU lacks ") + integer_isa_name(isa));
}

// The prompt's tiles on the paths that run them (AVX2 prompts take ternary_prompt_rows_avx2).
TernaryTileKernel tile_kernel(IntegerIsa isa) {
    return runs_avx512_vnni(isa) ? ternary_tile_kernel_avx512_vnni() : ternary_tile_kernel_scalar();
}

// factors[r] (x.rows) turns activation row r's exact integer dots into outputs; one buffer a
// thread, filled once a call for whichever path runs.
const float* output_factors(const TernaryMatrix& w, const Int8Rows& x) {
    thread_local std::vector<float> factors;
    factors.resize(static_cast<size_t>(x.rows));
    for (int r = 0; r < x.rows; ++r) factors[static_cast<size_t>(r)] = int8_output_factor(w.gamma, x.scales[r]);
    return factors.data();
}

// A prompt's many rows: weight rows unpacked to int8 a chunk at a time (small enough to stay in
// L2), then oneDNN's int8 GEMM, which blocks the activation rows for the caches where the tile
// kernels stream every row past each weight tile. Codes are q, not q + 1: no sum(a) to subtract.
void onednn_rows(const TernaryMatrix& w, const Int8Rows& x, const float* factors, float* out, int row_begin,
                 int row_end) {
    constexpr size_t kUnpackedBytes = 512 * 1024;
    // A whole number of 16-row blocks: oneDNN's s8 GEMM took 1.6x as long a weight row on 75
    // rows (what 512 KiB holds of the 2B FFN's 6,912-wide down rows) as on 80, and 1.1x on 204
    // rows of 2,560 as on 192 (Zen 5; docs/results.md, "The 2-bit prompt's chunks").
    const int chunk_rows = static_cast<int>(std::clamp<size_t>(kUnpackedBytes / w.padded_cols / 16 * 16, 16, 512));
    thread_local Array<int8_t> codes;  // (chunk_rows, w.padded_cols)
    thread_local Array<int32_t> sums;  // (x.rows, chunk_rows)
    const size_t code_count = static_cast<size_t>(chunk_rows) * w.padded_cols;
    const size_t sum_count = static_cast<size_t>(x.rows) * chunk_rows;
    if (codes.size() < code_count) codes = Array<int8_t>(MemCategory::scratch, code_count);
    if (sums.size() < sum_count) sums = Array<int32_t>(MemCategory::scratch, sum_count);
    for (int first = row_begin; first < row_end; first += chunk_rows) {
        const int count = std::min(chunk_rows, row_end - first);
        ternary_unpack_rows_avx2(w.packed.data(), w.row_bytes(), first, count, w.padded_cols / kTernaryBlock,
                                 codes.data());
        int8_gemm_exact(true, x.rows, count, w.padded_cols, x.values.data(), x.padded_cols, codes.data(),
                        w.padded_cols, sums.data(), count);
        for (int r = 0; r < x.rows; ++r) {
            const float factor = factors[r];
            const int32_t* sum_row = sums.data() + static_cast<size_t>(r) * count;
            float* out_row = out + static_cast<size_t>(r) * w.rows + first;
            for (int i = 0; i < count; ++i) out_row[i] = factor * static_cast<float>(sum_row[i]);
        }
    }
}

}  // namespace

TernaryCodeSlot ternary_code_slot(int col) {
    const int block = col / kTernaryBlock, within = col % kTernaryBlock;
    const int half = within / 128, n = (within % 128) / 32, m = within % 32;
    return {static_cast<size_t>(block) * kTernaryBlockBytes + static_cast<size_t>(half) * 32 + m, 2 * n};
}

TernaryMatrix pack_ternary(const int8_t* q, int rows, int cols, float gamma) {
    TernaryMatrix w;
    w.rows = rows;
    w.cols = cols;
    w.padded_cols = ternary_padded_cols(cols);
    w.gamma = gamma;
    w.packed = Array<uint8_t>(MemCategory::weights, static_cast<size_t>(rows) * w.row_bytes());
    // Byte by byte in the layout's order (ternary_code_slot's, inverted): byte m of half h of a
    // block holds weights 128h + 32n + m at bits 2n; the padding holds q = 0 (stored 1).
    for (int r = 0; r < rows; ++r) {
        const int8_t* q_row = q + static_cast<size_t>(r) * cols;
        uint8_t* row = w.packed.data() + static_cast<size_t>(r) * w.row_bytes();
        unsigned out_of_range = 0;  // checked once a row: a message is built only for a bad row
        for (int block = 0; block < w.padded_cols; block += kTernaryBlock) {
            for (int half = 0; half < 2; ++half) {
                for (int m = 0; m < 32; ++m) {
                    unsigned byte = 0;
                    for (int n = 0; n < 4; ++n) {
                        const int col = block + 128 * half + 32 * n + m;
                        const unsigned stored = static_cast<unsigned>((col < cols ? q_row[col] : 0) + 1);
                        out_of_range |= stored > 2 ? 1u : 0u;
                        byte |= (stored & 3u) << (2 * n);
                    }
                    row[block / 4 + 32 * half + m] = static_cast<uint8_t>(byte);
                }
            }
        }
        if (out_of_range != 0) {
            for (int c = 0; c < cols; ++c)
                if (q_row[c] < -1 || q_row[c] > 1)
                    throw Error("pack_ternary: code " + std::to_string(q_row[c]) + " is not ternary");
        }
    }
    return w;
}

int ternary_code_at(const TernaryMatrix& w, int row, int col) {
    const TernaryCodeSlot slot = ternary_code_slot(col);
    return ((w.row(row)[slot.byte] >> slot.shift) & 3) - 1;
}

void ternary_matmul(const TernaryMatrix& w, const Int8Rows& x, float* out) { ternary_matmul(w, x, out, best_integer_isa()); }

void ternary_matmul(const TernaryMatrix& w, const Int8Rows& x, float* out, IntegerIsa isa) {
    check_operands(w, x, isa);
    // Weight rows split over the threads, 16 at a time (a whole tile of the small-batch kernel's
    // one-row shape); each tile's rows stay in L1 while every activation row passes.
    constexpr int kRowsPerTask = 16;
    const int tasks = (w.rows + kRowsPerTask - 1) / kRowsPerTask;
#pragma omp parallel for schedule(static)
    for (int t = 0; t < tasks; ++t)
        ternary_matmul_rows(w, x, out, t * kRowsPerTask, std::min(w.rows, (t + 1) * kRowsPerTask), isa);
}

void ternary_matmul_rows(const TernaryMatrix& w, const Int8Rows& x, float* out, int row_begin, int row_end,
                         IntegerIsa isa) {
    check_operands(w, x, isa);
    const int blocks = w.padded_cols / kTernaryBlock;
    const float* factors = output_factors(w, x);
    if (x.rows <= kSmallBatchMaxRows && isa != IntegerIsa::scalar) {
        const auto small_batch = isa == IntegerIsa::avx2 ? ternary_small_batch_rows_avx2
                                 : isa == IntegerIsa::avx512_amx && x.rows >= kAmxMinRows
                                     ? ternary_small_batch_rows_amx
                                     : ternary_small_batch_rows_avx512_vnni;
        small_batch(w.packed.data(), w.row_bytes(), row_begin, row_end, x.row(0), static_cast<size_t>(x.padded_cols),
                    x.rows, x.sums.data(), factors, blocks, out, static_cast<size_t>(w.rows));
        return;
    }
    if (int8_matmul_uses_onednn(x.rows, x.padded_cols, isa)) {
        onednn_rows(w, x, factors, out, row_begin, row_end);
        return;
    }
    if (isa == IntegerIsa::avx2) {  // oneDNN's int8 GEMM without VNNI was 0.63x this (docs/results.md)
        ternary_prompt_rows_avx2(w.packed.data(), w.row_bytes(), row_begin, row_end, x.row(0),
                                 static_cast<size_t>(x.padded_cols), x.rows, x.sums.data(), factors, blocks, out,
                                 static_cast<size_t>(w.rows));
        return;
    }
    const TernaryTileKernel kernel = tile_kernel(isa);
    const int a_tiles = (x.rows + kernel.max_a_rows - 1) / kernel.max_a_rows;
    for (int w_first = row_begin; w_first < row_end; w_first += kTileWeightRows) {
        const int w_count = std::min(kTileWeightRows, row_end - w_first);
        const uint8_t* w_rows[kTileWeightRows];
        for (int i = 0; i < w_count; ++i) w_rows[i] = w.row(w_first + i);
        for (int u = 0; u < a_tiles; ++u) {
            const int a_first = u * kernel.max_a_rows;
            const int a_count = std::min(kernel.max_a_rows, x.rows - a_first);
            const int8_t* a_rows[4];
            for (int j = 0; j < a_count; ++j) a_rows[j] = x.row(a_first + j);
            int32_t dots[kTileWeightRows * kTileDotsStride];
            kernel.run(w_rows, w_count, a_rows, a_count, blocks, dots);
            for (int j = 0; j < a_count; ++j) {
                const int r = a_first + j;
                float* out_row = out + static_cast<size_t>(r) * w.rows + w_first;
                for (int i = 0; i < w_count; ++i)
                    out_row[i] = factors[r] * static_cast<float>(dots[i * kTileDotsStride + j] - x.sums[r]);
            }
        }
    }
}

void ternary_matmul_reference(const TernaryMatrix& w, const Int8Rows& x, float* out) {
    integer_matmul_reference(
        "ternary_matmul_reference", w.rows, w.cols, w.gamma, [&w](int o, int c) { return ternary_code_at(w, o, c); },
        x, out);
}

}  // namespace dqt
