#pragma once
// A 1.67-bit ternary layout for the one-row (decode) product, read by table lookups instead of
// unpacked codes (the idea of bitnet.cpp's TL2 kernels, written for AVX-512's vpermw).
//
// Each row's weights go in triples of columns; a triple's 27 patterns fold to 14 up to sign
// (v = 9(t0 + 1) + 3(t1 + 1) + (t2 + 1) in [0, 27), negation maps v to 26 - v, the zero
// triple is v = 13): index |v - 13| in [0, 14) and a sign bit v < 13. For one activation row
// a, a table per triple holds the 14 signed sums t . a[3g, 3g + 3) of the patterns 13 + i, so a
// lookup gives three products at once and the sign bit negates it.
//
// Layout: rows in tiles of 32 (the lanes of one vector of 16-bit sums), triples in pairs. Per
// tile and pair j, 40 bytes: byte r of the first 32 holds row r's index of triple 2j in its low
// nibble and of triple 2j + 1 in its high one; then two little-endian 32-bit words, bit r the
// sign of row r in triple 2j and 2j + 1. 40 bytes for 192 weights: 1.67 bits a weight. Rows
// are padded to a multiple of 32 and columns to a multiple of 6 with zero weights.
//
// Why: decode reads every weight once a token, so its speed is bytes over bandwidth where the
// arithmetic keeps up. Five trits a byte (TQ1_0, 1.6 bits) unpacked with 16-bit multiplies does
// not keep up on AVX-512; these lookups nearly do, and on some CPUs outrun the 2-bit layout's
// memory rate (build/bench_decode_stream; docs/results.md, "Fewer bytes a token"). The inference
// model holds a ternary linear in this layout where it decodes faster (infer/ternary_layout.h).
//
// A product of more than 8 activation rows (a prompt, a large batch of decodes) does not look
// up: each tile's codes are unpacked once to int8, column-major (ternary_lookup_unpack_tile), for
// oneDNN's int8 GEMM, which every activation row then shares.
#include <cstddef>
#include <cstdint>

#include "core/memory.h"
#include "kernels/int8_rows.h"
#include "kernels/ternary_matmul.h"

namespace dqt {

inline constexpr int kLookupTileRows = 32;
inline constexpr int kLookupPairBytes = 40;   // one tile's 2 triples: 32 index bytes, 2 sign words
inline constexpr int kLookupTableEntries = 16;  // per triple: 14 sums, 2 zeros (the vpermw index is 4 bits)

// A (rows, cols) ternary weight matrix in the lookup layout.
struct TernaryLookupMatrix {
    int rows = 0;
    int cols = 0;
    int triples = 0;        // column triples, even: cols rounded up to a multiple of 6, over 3
    float gamma = 0.0f;     // W = q * gamma
    Array<uint8_t> packed;  // (tiles, triples / 2, 40 bytes), category weights

    int tiles() const { return (rows + kLookupTileRows - 1) / kLookupTileRows; }
    size_t tile_bytes() const { return static_cast<size_t>(triples / 2) * kLookupPairBytes; }
};

// q (rows, cols), values in {-1, 0, 1}; dqt::Error for any other value.
TernaryLookupMatrix pack_ternary_lookup(const int8_t* q, int rows, int cols, float gamma);
// The same weights from the 2-bit layout (kernels/ternary_matmul.h), parallel over tiles.
TernaryLookupMatrix pack_ternary_lookup(const TernaryMatrix& two_bit);
// The code of one weight, read back from the layout.
int ternary_lookup_code_at(const TernaryLookupMatrix& w, int row, int col);

// The tables of one int8 activation row a (w.cols values): (w.triples + 2, 16) int16, the last
// two zero (the kernel's 64-byte loads of a 32-byte table read one table past).
size_t ternary_lookup_table_entries(const TernaryLookupMatrix& w);
void ternary_lookup_tables(const TernaryLookupMatrix& w, const int8_t* a, int16_t* tables);

// dots[r] = sum over the row of q[r] . a for rows in tiles [tile_begin, tile_end), from a's
// tables; rows past w.rows are not written. AVX-512 F and BW (vpermw); dqt::Error without.
void ternary_lookup_dots_avx512(const TernaryLookupMatrix& w, const int16_t* tables, int tile_begin, int tile_end,
                                int32_t* dots);
// The slow reference: weight by weight through ternary_lookup_code_at, int64 sums.
void ternary_lookup_dots_reference(const TernaryLookupMatrix& w, const int8_t* a, int64_t* dots);

// Tile t's codes as int8, column-major: codes (3 * w.triples, codes_stride), row c holding weight
// column c of the tile's 32 rows in bytes [0, 32) (zeros past w.rows and w.cols). AVX-512 BW
// and VL; dqt::Error without.
void ternary_lookup_unpack_tile(const TernaryLookupMatrix& w, int tile, int8_t* codes, size_t codes_stride);

// out (x.rows, w.rows) = x . W^T for weight rows [row_begin, row_end) only, on the calling
// thread, as ternary_matmul_rows writes it (the same float epilogue over exact int32 sums, so
// the same bits): one activation row by table lookups, more by unpacking tile by tile for
// oneDNN's int8 GEMM. Needs AVX-512 VNNI (best_integer_isa()); dqt::Error without, for
// x.cols != w.cols, or for a range outside [0, w.rows].
void ternary_lookup_matmul_rows(const TernaryLookupMatrix& w, const Int8Rows& x, float* out, int row_begin,
                                int row_end);
// Whether this CPU runs ternary_lookup_matmul_rows.
bool ternary_lookup_supported();
// The slow reference of that product, weight by weight.
void ternary_lookup_matmul_reference(const TernaryLookupMatrix& w, const Int8Rows& x, float* out);

}  // namespace dqt
