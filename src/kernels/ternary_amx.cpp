// Small batches of the ternary product on Intel's AMX tiles; see kernels/ternary_tiles.h.
//
// A tile multiply (tdpbusd) takes a 16 x 64 byte tile of unsigned bytes, a 16 x 64 byte tile
// of signed bytes in groups of four, and adds their product into a 16 x 16 int32 tile: 16,384
// multiply-adds in one instruction, where an AVX-512 VNNI dpbusd does 64. Here the unsigned
// tile is 16 weight rows' codes q + 1 (one k-step of 64 weights each), the signed one the
// activations of that k-step, and the sums are 16 weight rows x a_rows activation rows. The
// weights still have to be unpacked from 2 bits to bytes, by AVX-512 into an L1 buffer the
// tiles load from: that, and the weights' read, is what a step costs, not the products, so
// the time hardly grows from 5 to 16 activation rows (docs/results.md, "Eight streams on AMX
// tiles"). Below 5 rows the VNNI kernel is as fast (kAmxMinRows).
//
// Columns inside a block are taken in the order the codes unpack in: shifting a block's 64
// bytes right by 2n and masking gives the codes of columns 256b + 128h + 32n + m (byte 32h + m),
// so k-step n of block b is those 64 columns. The activations are arranged once a call into
// the same order, four bytes at a time: byte 4kk + t of a k-step (kk = 0..15) is column
// 128(kk / 8) + 32n + 4(kk % 8) + t of the block.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "core/memory.h"
#include "kernels/ternary_matmul.h"
#include "kernels/ternary_tiles.h"

namespace dqt {

namespace {

constexpr int kTileRows = 16;        // weight rows a sum tile, and 4-byte groups an activation tile
constexpr int kStepColumns = 64;     // columns a k-step: the bytes of one code tile row
// Weight rows a pass: two sum tiles share each activation tile (four, 64 rows, ran 5-8% slower
// on one thread of the 2B shape, their codes crowding L1).
constexpr int kPassRows = 2 * kTileRows;

// The tile registers' shapes, loaded by ldtilecfg (palette 1): bytes a row and rows a tile.
struct alignas(64) TileConfig {
    uint8_t palette = 1;
    uint8_t start_row = 0;
    uint8_t reserved[14] = {};
    uint16_t bytes_per_row[16] = {};
    uint8_t rows[16] = {};
};

// Registers: tmm0 and tmm1 the sums of a pass's two groups of 16 weight rows (a_rows int32 a
// row), tmm4 a k-step's activations (16 groups of 4 bytes x a_rows), tmm5 and tmm6 code tiles.
TileConfig tile_config(int a_rows) {
    TileConfig config;
    for (const int t : {0, 1, 4, 5, 6}) {
        config.rows[t] = kTileRows;
        config.bytes_per_row[t] = static_cast<uint16_t>(t <= 4 ? 4 * a_rows : kStepColumns);
    }
    return config;
}

// The activations (a_rows rows a_stride apart, blocks * 256 columns) in k-steps of 16 x a_rows
// groups of four bytes, the signed operand of tdpbusd, in the columns' order above.
void arrange_activations(const int8_t* a, size_t a_stride, int a_rows, int blocks, int8_t* out) {
    const size_t group_row_bytes = static_cast<size_t>(4) * a_rows;
    for (int b = 0; b < blocks; ++b)
        for (int n = 0; n < 4; ++n) {
            int8_t* step = out + static_cast<size_t>(4 * b + n) * kTileRows * group_row_bytes;
            for (int kk = 0; kk < kTileRows; ++kk)
                for (int r = 0; r < a_rows; ++r)
                    std::memcpy(step + kk * group_row_bytes + 4 * r,
                                a + r * a_stride + 256 * b + 128 * (kk / 8) + 32 * n + 4 * (kk % 8), 4);
        }
}

// Block b of `count` weight rows (row_bytes apart from `rows`) as codes q + 1: codes[n][i] is
// k-step n of row i. Rows past `count` keep earlier codes; their sums are not written. The next
// pass's bytes (from next_pass) are prefetched in address order, a block's share of them a
// block: these reads jump from row to row, which the hardware prefetcher alone followed at half
// the read limit. One prefetch goes with each row's load: issued 32 at a time they held the
// line-fill buffers, and the loads behind them waited (an 8-stream serve step ran 17% slower).
__attribute__((target("avx512f,avx512bw"))) void unpack_block(const uint8_t* rows, size_t row_bytes, int b, int count,
                                                               const uint8_t* next_pass,
                                                               uint8_t (*codes)[kPassRows][kStepColumns]) {
    const __m512i low2 = _mm512_set1_epi8(3);
    for (int i = 0; i < count; ++i) {
        _mm_prefetch(reinterpret_cast<const char*>(next_pass + (static_cast<size_t>(b) * kPassRows + i) * 64), _MM_HINT_T1);
        const __m512i w = _mm512_loadu_si512(rows + static_cast<size_t>(i) * row_bytes +
                                             static_cast<size_t>(b) * kTernaryBlockBytes);
#pragma GCC unroll 4
        for (int n = 0; n < 4; ++n) _mm512_store_si512(codes[n][i], _mm512_and_si512(_mm512_srli_epi16(w, 2 * n), low2));
    }
}

}  // namespace

__attribute__((target("avx512f,avx512bw,amx-tile,amx-int8"))) void ternary_small_batch_rows_amx(
    const uint8_t* packed, size_t row_bytes, int row_begin, int row_end, const int8_t* a, size_t a_stride,
    int a_rows, const int32_t* a_sums, const float* factors, int blocks, float* out, size_t out_stride) {
    if (a_rows < 1 || a_rows > kSmallBatchMaxRows)
        throw Error("ternary small batch (AMX): activation rows outside 1 to kSmallBatchMaxRows");
    // A sum adds at most 2 x 128 a column: int32 holds 8.4M columns, as the VNNI kernel's.
    if (blocks > 32767) throw Error("ternary small batch (AMX): rows longer than 32,767 blocks of 256 weights");
    const size_t step_bytes = static_cast<size_t>(kTileRows) * 4 * a_rows;  // one k-step's activations
    thread_local Array<int8_t> activations;  // (4 * blocks k-steps, 16, 4 * a_rows)
    if (activations.size() < 4 * static_cast<size_t>(blocks) * step_bytes)
        activations = Array<int8_t>(MemCategory::scratch, 4 * static_cast<size_t>(blocks) * step_bytes);
    arrange_activations(a, a_stride, a_rows, blocks, activations.data());
    // One block of a pass's weight rows unpacked, double-buffered: (2, 4 k-steps, kPassRows, 64)
    // codes q + 1, in L1.
    alignas(64) uint8_t codes[2][4][kPassRows][kStepColumns];
    alignas(64) int32_t sums[kPassRows][kTileRows];  // (weight row, activation row)
    const TileConfig config = tile_config(a_rows);
    _tile_loadconfig(&config);
    const long step_stride = 4 * a_rows;
    for (int first = row_begin; first < row_end; first += kPassRows) {
        const int count = std::min(kPassRows, row_end - first);
        const bool second_tile = count > kTileRows;
        const uint8_t* pass = packed + static_cast<size_t>(first) * row_bytes;
        const uint8_t* next_pass = pass + kPassRows * row_bytes;  // past the matrix's end: prefetches do not fault
        _tile_zero(0);
        _tile_zero(1);
        unpack_block(pass, row_bytes, 0, count, next_pass, codes[0]);
        for (int b = 0; b < blocks; ++b) {
            // The next block unpacked before this one's tiles run, so that the tile loads read
            // codes stored an iteration ago and the unpacking overlaps the tile products.
            if (b + 1 < blocks) unpack_block(pass, row_bytes, b + 1, count, next_pass, codes[(b + 1) % 2]);
            for (int n = 0; n < 4; ++n) {
                const auto& step_codes = codes[b % 2][n];
                _tile_loadd(4, activations.data() + static_cast<size_t>(4 * b + n) * step_bytes, step_stride);
                _tile_loadd(5, step_codes[0], kStepColumns);
                _tile_dpbusd(0, 5, 4);
                if (second_tile) {
                    _tile_loadd(6, step_codes[16], kStepColumns);
                    _tile_dpbusd(1, 6, 4);
                }
            }
        }
        constexpr long kSumStride = kTileRows * sizeof(int32_t);
        _tile_stored(0, sums[0], kSumStride);
        _tile_stored(1, sums[16], kSumStride);
        for (int r = 0; r < a_rows; ++r) {
            float* out_row = out + static_cast<size_t>(r) * out_stride + first;
            for (int i = 0; i < count; ++i)
                out_row[i] = factors[r] * static_cast<float>(sums[i][r] - a_sums[r]);
        }
    }
    _tile_release();
}

}  // namespace dqt
