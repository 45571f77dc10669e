// The 1.67-bit lookup layout and its decode kernel; see kernels/ternary_lookup.h.
#include "kernels/ternary_lookup.h"

#include <immintrin.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>

#include "core/error.h"

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
int pattern_code(int v, int k) {
    const int place = k == 0 ? 9 : k == 1 ? 3 : 1;
    return v / place % 3 - 1;
}

}  // namespace

TernaryLookupMatrix pack_ternary_lookup(const int8_t* q, int rows, int cols, float gamma) {
    if (rows < 0 || cols < 0) throw Error("pack_ternary_lookup: negative shape");
    TernaryLookupMatrix w;
    w.rows = rows;
    w.cols = cols;
    w.triples = (cols + 5) / 6 * 2;
    w.gamma = gamma;
    w.packed = Array<uint8_t>(MemCategory::weights, static_cast<size_t>(w.tiles()) * w.tile_bytes());
    for (int r = 0; r < rows; ++r) {
        const int8_t* q_row = q + static_cast<size_t>(r) * cols;
        uint8_t* tile = w.packed.data() + static_cast<size_t>(r / kLookupTileRows) * w.tile_bytes();
        const int lane = r % kLookupTileRows;
        for (int g = 0; g < w.triples; ++g) {
            int v = 0;
            for (int k = 0; k < 3; ++k) {
                const int col = 3 * g + k;
                const int code = col < cols ? q_row[col] : 0;
                if (code < -1 || code > 1) throw Error("pack_ternary_lookup: code " + std::to_string(code) + " is not ternary");
                v = 3 * v + code + 1;
            }
            const TripleSlot slot = triple_slot(g);
            uint8_t* pair = tile + slot.pair_offset;
            pair[lane] |= static_cast<uint8_t>(std::abs(v - kZeroTriple) << slot.nibble_shift);
            if (v < kZeroTriple) pair[32 + 4 * slot.sign_word + lane / 8] |= static_cast<uint8_t>(1u << (lane % 8));
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
    std::memset(tables, 0, ternary_lookup_table_entries(w) * sizeof(int16_t));
    for (int g = 0; g < w.triples; ++g) {
        int triple_a[3];
        for (int k = 0; k < 3; ++k) triple_a[k] = 3 * g + k < w.cols ? a[3 * g + k] : 0;
        int16_t* table = tables + static_cast<size_t>(g) * kLookupTableEntries;
        // Pattern 13 + i for i in [0, 14): the codes of v, each weight's code in {-1, 0, 1}.
        for (int i = 0; i < 14; ++i) {
            const int v = kZeroTriple + i;
            table[i] = static_cast<int16_t>(pattern_code(v, 0) * triple_a[0] + pattern_code(v, 1) * triple_a[1] +
                                            pattern_code(v, 2) * triple_a[2]);
        }
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

}  // namespace dqt
