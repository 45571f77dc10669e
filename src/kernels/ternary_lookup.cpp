// The 1.67-bit lookup layout, its decode kernel and its many-row product; see kernels/ternary_lookup.h.
#include "kernels/ternary_lookup.h"

#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "core/error.h"
#include "kernels/int8_matmul.h"
#include "kernels/integer_isa.h"
#include "kernels/integer_matmul_reference.h"

namespace dqt {

namespace {

constexpr int kZeroTriple = 13;  // v of the all-zero triple, the middle of [0, 27)

// Where triple g of a row sits in its tile: the pair's 40 bytes, the nibble, the sign word.
struct TripleSlot {
    size_t pair_offset;  // from the tile's start
    int nibble_shift;    // 0 or 4
    int sign_word;       // 0 or 1
};
TripleSlot triple_slot(int g) {
    return {static_cast<size_t>(g / 2) * kLookupPairBytes, 4 * (g % 2), g % 2};
}

// Code k (0, 1, 2 for the first, second, third weight) of pattern v in [0, 27), in {-1, 0, 1}.
constexpr int pattern_code(int v, int k) {
    const int place = k == 0 ? 9 : k == 1 ? 3 : 1;
    return v / place % 3 - 1;
}

// kTableCodes[k][i]: code k of table entry i, the pattern 13 + i (entries 14 and 15 zero), as
// the tables and the unpacking index them.
using TableCodes = std::array<std::array<int8_t, kLookupTableEntries>, 3>;
constexpr TableCodes make_table_codes() {
    TableCodes codes{};
    for (int k = 0; k < 3; ++k)
        for (int i = 0; i < 14; ++i) codes[k][i] = static_cast<int8_t>(pattern_code(kZeroTriple + i, k));
    return codes;
}
constexpr TableCodes kTableCodes = make_table_codes();

// A matrix of the given shape, every byte zero until its tiles are packed.
TernaryLookupMatrix empty_lookup_matrix(int rows, int cols, float gamma) {
    if (rows < 0 || cols < 0) throw Error("pack_ternary_lookup: negative shape");
    TernaryLookupMatrix w;
    w.rows = rows;
    w.cols = cols;
    w.triples = (cols + 5) / 6 * 2;
    w.gamma = gamma;
    w.packed = Array<uint8_t>(MemCategory::weights, static_cast<size_t>(w.tiles()) * w.tile_bytes());
    return w;
}

// One tile's codes before packing, a column's 32 lanes side by side so that the packing runs
// over lanes: (3 * w.triples, kLookupTileRows), zero past the matrix's rows and columns (the
// all-zero triple packs to index 0, sign clear).
struct TileCodes {
    std::vector<int8_t> codes;
    explicit TileCodes(const TernaryLookupMatrix& w) : codes(static_cast<size_t>(3 * w.triples) * kLookupTileRows) {}
    int8_t& at(int col, int lane) { return codes[static_cast<size_t>(col) * kLookupTileRows + lane]; }
};

// Tile t of w from its codes: each pair of triples is 32 bytes of indices (a lane's two |v - 13|,
// the first in the low nibble) and two 32-bit sign words (bit l: lane l's triple is negative).
void pack_tile(const TileCodes& tile_codes, int t, TernaryLookupMatrix& w) {
    uint8_t* tile = w.packed.data() + static_cast<size_t>(t) * w.tile_bytes();
    for (int p = 0; p < w.triples / 2; ++p) {
        uint8_t* pair = tile + static_cast<size_t>(p) * kLookupPairBytes;
        const int8_t* q = tile_codes.codes.data() + static_cast<size_t>(6 * p) * kLookupTileRows;  // column 6p, lane 0
        std::array<int8_t, kLookupTileRows> first, second;  // v - 13 of triples 2p and 2p + 1, by lane
        for (int l = 0; l < kLookupTileRows; ++l) {
            first[l] = static_cast<int8_t>(9 * q[l] + 3 * q[kLookupTileRows + l] + q[2 * kLookupTileRows + l]);
            second[l] = static_cast<int8_t>(9 * q[3 * kLookupTileRows + l] + 3 * q[4 * kLookupTileRows + l] +
                                            q[5 * kLookupTileRows + l]);
            pair[l] = static_cast<uint8_t>(std::abs(first[l]) | std::abs(second[l]) << 4);
        }
        for (int byte = 0; byte < 4; ++byte) {
            uint8_t first_signs = 0, second_signs = 0;
            for (int bit = 0; bit < 8; ++bit) {
                first_signs |= static_cast<uint8_t>((first[8 * byte + bit] < 0) << bit);
                second_signs |= static_cast<uint8_t>((second[8 * byte + bit] < 0) << bit);
            }
            pair[32 + byte] = first_signs;
            pair[36 + byte] = second_signs;
        }
    }
}

// Tile t's rows of a 2-bit matrix into tile_codes: byte b of the tile's 32 rows, side by side,
// holds four columns' codes for every lane (kernels/ternary_matmul.h: byte m of half h of a
// block holds weights 128h + 32n + m at bits 2n).
void unpack_two_bit_tile(const TernaryMatrix& w, int t, TileCodes& tile_codes) {
    const int first_row = t * kLookupTileRows;
    const int lanes = std::min(kLookupTileRows, w.rows - first_row);
    std::array<uint8_t, kLookupTileRows> bytes;
    bytes.fill(0x55);  // four code-0 fields: the lanes past the matrix's rows
    for (size_t b = 0; b < w.row_bytes(); ++b) {
        for (int l = 0; l < lanes; ++l) bytes[l] = w.row(first_row + l)[b];
        const int first = static_cast<int>(b / kTernaryBlockBytes) * kTernaryBlock + static_cast<int>(b % 64 / 32) * 128 +
                          static_cast<int>(b % 32);
        for (int n = 0; n < 4; ++n) {
            const int col = first + 32 * n;
            if (col >= w.cols) continue;  // past the row: those columns stay zero
            int8_t* lane_codes = &tile_codes.at(col, 0);
            for (int l = 0; l < kLookupTileRows; ++l) lane_codes[l] = static_cast<int8_t>(((bytes[l] >> (2 * n)) & 3) - 1);
        }
    }
}

}  // namespace

TernaryLookupMatrix pack_ternary_lookup(const int8_t* q, int rows, int cols, float gamma) {
    TernaryLookupMatrix w = empty_lookup_matrix(rows, cols, gamma);
    for (size_t i = 0; i < static_cast<size_t>(rows) * cols; ++i)
        if (q[i] < -1 || q[i] > 1) throw Error("pack_ternary_lookup: code " + std::to_string(q[i]) + " is not ternary");
    TileCodes tile_codes(w);
    for (int t = 0; t < w.tiles(); ++t) {
        for (int l = 0; l < kLookupTileRows; ++l) {
            const int r = t * kLookupTileRows + l;
            for (int c = 0; c < cols; ++c) tile_codes.at(c, l) = r < rows ? q[static_cast<size_t>(r) * cols + c] : 0;
        }
        pack_tile(tile_codes, t, w);
    }
    return w;
}

TernaryLookupMatrix pack_ternary_lookup(const TernaryMatrix& two_bit) {
    TernaryLookupMatrix w = empty_lookup_matrix(two_bit.rows, two_bit.cols, two_bit.gamma);
    // Each tile to one thread (its lanes share bytes). The codes are ternary already: every
    // reader of 2-bit codes refuses code 3, and a 2-bit field decodes to at most 2 - 1.
#pragma omp parallel
    {
        TileCodes tile_codes(w);
#pragma omp for schedule(static)
        for (int t = 0; t < w.tiles(); ++t) {
            unpack_two_bit_tile(two_bit, t, tile_codes);
            pack_tile(tile_codes, t, w);
        }
    }
    return w;
}

int ternary_lookup_code_at(const TernaryLookupMatrix& w, int row, int col) {
    const int g = col / 3;
    const TripleSlot slot = triple_slot(g);
    const uint8_t* pair =
        w.packed.data() + static_cast<size_t>(row / kLookupTileRows) * w.tile_bytes() + slot.pair_offset;
    const int lane = row % kLookupTileRows;
    const int index = (pair[lane] >> slot.nibble_shift) & 15;
    const bool negated = (pair[32 + 4 * slot.sign_word + lane / 8] >> (lane % 8)) & 1;
    const int code = pattern_code(kZeroTriple + index, col % 3);
    return negated ? -code : code;
}

size_t ternary_lookup_table_entries(const TernaryLookupMatrix& w) {
    return static_cast<size_t>(w.triples + 2) * kLookupTableEntries;
}

void ternary_lookup_tables(const TernaryLookupMatrix& w, const int8_t* a, int16_t* tables) {
    // Entry i of triple g's table: the signed sum of pattern 13 + i's codes against a[3g, 3g + 3)
    // (entries 14 and 15 have zero codes). Every decode product builds its row's tables, so the
    // 16 entries are one loop over constant codes, which the compiler vectorizes.
    std::memset(tables + static_cast<size_t>(w.triples) * kLookupTableEntries, 0,
                2 * kLookupTableEntries * sizeof(int16_t));
    for (int g = 0; g < w.triples; ++g) {
        int16_t triple_a[3];
        for (int k = 0; k < 3; ++k) triple_a[k] = 3 * g + k < w.cols ? a[3 * g + k] : 0;
        int16_t* table = tables + static_cast<size_t>(g) * kLookupTableEntries;
        for (int i = 0; i < kLookupTableEntries; ++i)
            table[i] = static_cast<int16_t>(kTableCodes[0][i] * triple_a[0] + kTableCodes[1][i] * triple_a[1] +
                                            kTableCodes[2][i] * triple_a[2]);
    }
}

namespace {

// GCC 12's widening and extract intrinsics trip its own uninitialised-value warning (an
// undefined merge source inside the intrinsic), as in kernels/ternary_tiles.cpp.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

// A tile's 32 rows as the lanes of two accumulators of 16-bit sums, one for the even triples of
// each pair and one for the odd: a table entry is at most 3 x 128 = 384 in magnitude, so 40
// pairs put at most 15,360 in each and 30,720 in their sum, which is then widened to 32 bits.
__attribute__((target("avx512f,avx512bw"))) void lookup_tiles(const TernaryLookupMatrix& w, const int16_t* tables,
                                                             int tile_begin, int tile_end, int32_t* dots) {
    // How far ahead the stream is prefetched into L2, as the 2-bit decode tile does
    // (kernels/ternary_tiles.cpp, kStreamPrefetchBytes).
    constexpr size_t kPrefetchBytes = 8192;
    constexpr int kPairsBeforeWidening = 40;
    const int pairs = w.triples / 2;
    const __m512i low_nibble = _mm512_set1_epi16(0x0F);
    for (int t = tile_begin; t < tile_end; ++t) {
        const uint8_t* tile = w.packed.data() + static_cast<size_t>(t) * w.tile_bytes();
        __m512i low_rows = _mm512_setzero_si512(), high_rows = _mm512_setzero_si512();  // rows 0-15, 16-31, int32
        for (int j = 0; j < pairs;) {
            const int end = std::min(pairs, j + kPairsBeforeWidening);
            __m512i even = _mm512_setzero_si512(), odd = _mm512_setzero_si512();
            for (; j < end; ++j) {
                const uint8_t* pair = tile + static_cast<size_t>(j) * kLookupPairBytes;
                _mm_prefetch(reinterpret_cast<const char*>(pair + kPrefetchBytes), _MM_HINT_T1);
                const __m512i indices =
                    _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(pair)));
                uint32_t even_signs, odd_signs;
                std::memcpy(&even_signs, pair + 32, 4);
                std::memcpy(&odd_signs, pair + 36, 4);
                const int16_t* even_table = tables + static_cast<size_t>(2 * j) * kLookupTableEntries;
                const __m512i even_sums =
                    _mm512_permutexvar_epi16(_mm512_and_si512(indices, low_nibble), _mm512_loadu_si512(even_table));
                const __m512i odd_sums = _mm512_permutexvar_epi16(
                    _mm512_srli_epi16(indices, 4), _mm512_loadu_si512(even_table + kLookupTableEntries));
                // += where the sign bit is clear, -= where it is set.
                even = _mm512_mask_sub_epi16(_mm512_add_epi16(even, even_sums), even_signs, even, even_sums);
                odd = _mm512_mask_sub_epi16(_mm512_add_epi16(odd, odd_sums), odd_signs, odd, odd_sums);
            }
            const __m512i both = _mm512_add_epi16(even, odd);
            low_rows = _mm512_add_epi32(low_rows, _mm512_cvtepi16_epi32(_mm512_castsi512_si256(both)));
            high_rows = _mm512_add_epi32(high_rows, _mm512_cvtepi16_epi32(_mm512_extracti64x4_epi64(both, 1)));
        }
        alignas(64) int32_t lanes[kLookupTileRows];
        _mm512_store_si512(lanes, low_rows);
        _mm512_store_si512(lanes + 16, high_rows);
        const int first = t * kLookupTileRows, count = std::min(kLookupTileRows, w.rows - first);
        std::memcpy(dots + first, lanes, static_cast<size_t>(count) * sizeof(int32_t));
    }
}
#pragma GCC diagnostic pop

}  // namespace

void ternary_lookup_dots_avx512(const TernaryLookupMatrix& w, const int16_t* tables, int tile_begin, int tile_end,
                                int32_t* dots) {
    if (!__builtin_cpu_supports("avx512f") || !__builtin_cpu_supports("avx512bw"))
        throw Error("ternary_lookup_dots_avx512: this CPU lacks AVX-512 F and BW");
    if (tile_begin < 0 || tile_end > w.tiles() || tile_begin > tile_end)
        throw Error("ternary_lookup_dots_avx512: tiles [" + std::to_string(tile_begin) + ", " + std::to_string(tile_end) +
                    ") outside [0, " + std::to_string(w.tiles()) + ")");
    lookup_tiles(w, tables, tile_begin, tile_end, dots);
}

void ternary_lookup_dots_reference(const TernaryLookupMatrix& w, const int8_t* a, int64_t* dots) {
    for (int r = 0; r < w.rows; ++r) {
        int64_t sum = 0;
        for (int c = 0; c < w.cols; ++c) sum += static_cast<int64_t>(ternary_lookup_code_at(w, r, c)) * a[c];
        dots[r] = sum;
    }
}

namespace {

// Up to this many activation rows go through lookups, more through the unpacked codes and
// oneDNN: on an Intel Xeon with 2B-shaped matrices the lookups took 0.36-0.98x the GEMM's time
// up to 8 rows, 1.02-1.09x at 12 (docs/results.md, "The lookup layout in the model").
constexpr int kLookupMaxRows = 8;

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

// Tile t's codes into codes (3 * w.triples, stride), 32 bytes a row: per pair, each nibble picks
// its triple's three codes from 16-byte tables (vpshufb), and the sign word negates its rows.
__attribute__((target("avx512f,avx512bw,avx512vl"))) void unpack_tile(const TernaryLookupMatrix& w, int t,
                                                                      int8_t* codes, size_t stride) {
    const uint8_t* tile = w.packed.data() + static_cast<size_t>(t) * w.tile_bytes();
    __m256i code_tables[3];
    for (int k = 0; k < 3; ++k)
        code_tables[k] =
            _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kTableCodes[k].data())));
    const __m256i low_nibble = _mm256_set1_epi8(0x0F), zero = _mm256_setzero_si256();
    for (int j = 0; j < w.triples / 2; ++j) {
        const uint8_t* pair = tile + static_cast<size_t>(j) * kLookupPairBytes;
        const __m256i indices = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(pair));
        const __m256i nibbles[2] = {_mm256_and_si256(indices, low_nibble),
                                    _mm256_and_si256(_mm256_srli_epi16(indices, 4), low_nibble)};
        for (int odd = 0; odd < 2; ++odd) {
            uint32_t signs;
            std::memcpy(&signs, pair + 32 + 4 * odd, 4);
            for (int k = 0; k < 3; ++k) {
                const __m256i code = _mm256_shuffle_epi8(code_tables[k], nibbles[odd]);
                int8_t* code_row = codes + static_cast<size_t>(6 * j + 3 * odd + k) * stride;  // column 6j + 3 odd + k
                _mm256_storeu_si256(reinterpret_cast<__m256i*>(code_row), _mm256_mask_sub_epi8(code, signs, zero, code));
            }
        }
    }
}

#pragma GCC diagnostic pop

// A few activation rows by lookups: each row's tables, then the tiles that hold rows
// [row_begin, row_end) a chunk at a time, every row's lookups over a chunk before the next, so
// the chunk is read from memory once.
void lookup_rows(const TernaryLookupMatrix& w, const Int8Rows& x, float* out, int row_begin, int row_end) {
    constexpr int kChunkTiles = 8;
    thread_local Array<int16_t> tables;  // (x.rows, table entries)
    thread_local Array<int32_t> dots;    // (x.rows, w.rows), indexed by weight row
    const size_t table_entries = ternary_lookup_table_entries(w);
    const size_t rows = static_cast<size_t>(x.rows);
    if (tables.size() < rows * table_entries) tables = Array<int16_t>(MemCategory::scratch, rows * table_entries);
    if (dots.size() < rows * w.rows) dots = Array<int32_t>(MemCategory::scratch, rows * w.rows);
    for (size_t r = 0; r < rows; ++r)
        ternary_lookup_tables(w, x.row(static_cast<int>(r)), tables.data() + r * table_entries);
    const int tile_end = (row_end + kLookupTileRows - 1) / kLookupTileRows;
    for (int first = row_begin / kLookupTileRows; first < tile_end; first += kChunkTiles)
        for (size_t r = 0; r < rows; ++r)
            lookup_tiles(w, tables.data() + r * table_entries, first, std::min(tile_end, first + kChunkTiles),
                         dots.data() + r * w.rows);
    for (size_t r = 0; r < rows; ++r) {
        const float factor = int8_output_factor(w.gamma, x.scales[r]);
        const int32_t* dot_row = dots.data() + r * w.rows;
        float* out_row = out + r * w.rows;
        for (int o = row_begin; o < row_end; ++o) out_row[o] = factor * static_cast<float>(dot_row[o]);
    }
}

// Many activation rows: tiles unpacked a few at a time, side by side, into int8 codes (K, N)
// small enough to stay in L2, then sums (x.rows, N) = a . codes by oneDNN's int8 GEMM.
void lookup_gemm_rows(const TernaryLookupMatrix& w, const Int8Rows& x, float* out, int row_begin, int row_end) {
    constexpr size_t kUnpackedBytes = 512 * 1024;
    constexpr int kMaxChunkTiles = 8;
    const size_t code_rows = static_cast<size_t>(3) * w.triples;
    const int chunk_tiles =
        static_cast<int>(std::clamp<size_t>(kUnpackedBytes / (code_rows * kLookupTileRows), 1, kMaxChunkTiles));
    const int chunk_cols = chunk_tiles * kLookupTileRows;
    thread_local Array<int8_t> codes;   // (3 * w.triples, chunk_cols)
    thread_local Array<int32_t> sums;   // (x.rows, chunk_cols)
    if (codes.size() < code_rows * chunk_cols) codes = Array<int8_t>(MemCategory::scratch, code_rows * chunk_cols);
    const size_t sum_count = static_cast<size_t>(x.rows) * chunk_cols;
    if (sums.size() < sum_count) sums = Array<int32_t>(MemCategory::scratch, sum_count);
    const int tile_end = (row_end + kLookupTileRows - 1) / kLookupTileRows;
    for (int first_tile = row_begin / kLookupTileRows; first_tile < tile_end; first_tile += chunk_tiles) {
        const int tiles = std::min(chunk_tiles, tile_end - first_tile);
        for (int i = 0; i < tiles; ++i)
            unpack_tile(w, first_tile + i, codes.data() + static_cast<size_t>(i) * kLookupTileRows, chunk_cols);
        const int n = tiles * kLookupTileRows;
        int8_gemm_exact(false, x.rows, n, w.cols, x.values.data(), x.padded_cols, codes.data(), chunk_cols, sums.data(),
                        chunk_cols);
        const int first_row = first_tile * kLookupTileRows;
        const int o_begin = std::max(row_begin, first_row), o_end = std::min(row_end, first_row + n);
        for (int r = 0; r < x.rows; ++r) {
            const float factor = int8_output_factor(w.gamma, x.scales[r]);
            const int32_t* sum_row = sums.data() + static_cast<size_t>(r) * chunk_cols;  // column o - first_row
            float* out_row = out + static_cast<size_t>(r) * w.rows;
            for (int o = o_begin; o < o_end; ++o) out_row[o] = factor * static_cast<float>(sum_row[o - first_row]);
        }
    }
}

}  // namespace

void ternary_lookup_unpack_tile(const TernaryLookupMatrix& w, int tile, int8_t* codes, size_t codes_stride) {
    if (!__builtin_cpu_supports("avx512bw") || !__builtin_cpu_supports("avx512vl"))
        throw Error("ternary_lookup_unpack_tile: this CPU lacks AVX-512 BW and VL");
    if (tile < 0 || tile >= w.tiles() || codes_stride < static_cast<size_t>(kLookupTileRows))
        throw Error("ternary_lookup_unpack_tile: tile " + std::to_string(tile) + " of " + std::to_string(w.tiles()) +
                    ", row stride " + std::to_string(codes_stride));
    unpack_tile(w, tile, codes, codes_stride);
}

void ternary_lookup_matmul_rows(const TernaryLookupMatrix& w, const Int8Rows& x, float* out, int row_begin,
                                int row_end) {
    // Checked with if, not require(): the message would be built on every call.
    if (x.cols != w.cols)
        throw Error("ternary_lookup_matmul_rows: activations have " + std::to_string(x.cols) + " columns, weights " +
                    std::to_string(w.cols));
    if (row_begin < 0 || row_end > w.rows || row_begin > row_end)
        throw Error("ternary_lookup_matmul_rows: rows [" + std::to_string(row_begin) + ", " + std::to_string(row_end) +
                    ") outside [0, " + std::to_string(w.rows) + ")");
    if (!ternary_lookup_supported()) throw Error("ternary_lookup_matmul_rows: this CPU lacks AVX-512 VNNI and VL");
    if (row_begin == row_end) return;
    if (x.rows <= kLookupMaxRows)
        lookup_rows(w, x, out, row_begin, row_end);
    else
        lookup_gemm_rows(w, x, out, row_begin, row_end);
}

bool ternary_lookup_supported() {
    return integer_isa_supported(IntegerIsa::avx512_vnni) && __builtin_cpu_supports("avx512vl");
}

void ternary_lookup_matmul_reference(const TernaryLookupMatrix& w, const Int8Rows& x, float* out) {
    integer_matmul_reference(
        "ternary_lookup_matmul_reference", w.rows, w.cols, w.gamma,
        [&w](int o, int c) { return ternary_lookup_code_at(w, o, c); }, x, out);
}

}  // namespace dqt
