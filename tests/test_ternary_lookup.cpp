// The 1.67-bit lookup layout (kernels/ternary_lookup.h): its packing read back weight by
// weight, its documented bytes, the AVX-512 kernel, the tile unpacking and the whole product
// (one row and many, any row range) against the slow references on fresh random shapes, ragged
// ones and the largest sums included, and the product's bits against the 2-bit layout's.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <utility>
#include <vector>

#include "core/error.h"
#include "kernels/integer_isa.h"
#include "kernels/ternary_lookup.h"
#include "test_helpers.h"

namespace dqt {
namespace {

bool have_avx512_bw() { return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw"); }
// What ternary_lookup_matmul_rows needs.
bool have_lookup_product() {
    return integer_isa_supported(IntegerIsa::avx512_vnni) && __builtin_cpu_supports("avx512vl");
}

std::vector<int8_t> random_codes(std::mt19937& rng, size_t count) { return testing::random_int8(rng, count, -1, 1); }

std::vector<int8_t> random_activations(std::mt19937& rng, size_t count) {
    return testing::random_int8(rng, count, -128, 127);
}

// Every tile through the kernel, then compared with the reference row by row.
void expect_kernel_matches_reference(const TernaryLookupMatrix& w, const std::vector<int8_t>& a) {
    std::vector<int16_t> tables(ternary_lookup_table_entries(w));
    ternary_lookup_tables(w, a.data(), tables.data());
    std::vector<int32_t> dots(w.rows, 0x7eadbeef);
    ternary_lookup_dots_avx512(w, tables.data(), 0, w.tiles(), dots.data());
    std::vector<int64_t> expected(w.rows);
    ternary_lookup_dots_reference(w, a.data(), expected.data());
    for (int r = 0; r < w.rows; ++r) ASSERT_EQ(dots[r], expected[r]) << w.rows << "x" << w.cols << " row " << r;
}

TEST(TernaryLookup, PackedCodesRoundTripIncludingRaggedShapes) {
    std::mt19937 rng(21);
    for (int rows : {1, 31, 32, 33, 70})
        for (int cols : {1, 2, 5, 6, 7, 256, 2561}) {
            const auto q = random_codes(rng, static_cast<size_t>(rows) * cols);
            const TernaryLookupMatrix w = pack_ternary_lookup(q.data(), rows, cols, 0.5f);
            EXPECT_EQ(w.triples % 2, 0);
            EXPECT_GE(3 * w.triples, cols);
            EXPECT_LT(3 * w.triples, cols + 6);
            for (int r = 0; r < rows; ++r)
                for (int c = 0; c < cols; ++c)
                    ASSERT_EQ(ternary_lookup_code_at(w, r, c), q[static_cast<size_t>(r) * cols + c]) << rows << "x" << cols;
            // The padding holds zero weights, so it adds nothing to a product.
            for (int r = 0; r < rows; ++r)
                for (int c = cols; c < 3 * w.triples; ++c) ASSERT_EQ(ternary_lookup_code_at(w, r, c), 0);
        }
}

TEST(TernaryLookup, LayoutIsTheDocumentedOne) {
    // Row 5 of a 40-row matrix (tile 0, lane 5) and row 33 (tile 1, lane 1); 12 columns, so
    // four triples in two pairs of 40 bytes a tile.
    std::vector<int8_t> q(40 * 12, 0);
    q[5 * 12 + 0] = 1;     // triple 0 of row 5: (1, 0, 0): v = 22, index 9, sign clear
    q[5 * 12 + 5] = 1;     // triple 1 of row 5: (0, 0, 1): v = 14, index 1
    q[33 * 12 + 6] = -1;   // triple 2 of row 33: (-1, 1, 0): v = 0 + 6 + 1 = 7, index 6, negated
    q[33 * 12 + 7] = 1;
    const TernaryLookupMatrix w = pack_ternary_lookup(q.data(), 40, 12, 1.0f);
    ASSERT_EQ(w.triples, 4);
    ASSERT_EQ(w.tile_bytes(), 80u);
    const uint8_t* tile0 = w.packed.data();
    EXPECT_EQ(tile0[5], 9 | (1 << 4));
    EXPECT_EQ(tile0[32] | tile0[33] | tile0[34] | tile0[35] | tile0[36] | tile0[37], 0);  // no sign set in pair 0
    const uint8_t* tile1_pair1 = w.packed.data() + 80 + 40;
    EXPECT_EQ(tile1_pair1[1], 6);
    EXPECT_EQ(tile1_pair1[32], 1 << 1);  // even triple's sign word, bit of lane 1
    EXPECT_EQ(tile1_pair1[36], 0);
    // Every other byte holds the zero triple (index 0, no sign).
    int nonzero = 0;
    for (size_t i = 0; i < w.packed.size(); ++i) nonzero += w.packed.data()[i] != 0;
    EXPECT_EQ(nonzero, 3);
}

TEST(TernaryLookup, KernelMatchesReferenceOnRandomShapes) {
    if (!have_avx512_bw()) GTEST_SKIP() << "no AVX-512 BW here";
    std::mt19937 rng(22);
    for (int rows : {1, 17, 32, 45, 96})
        for (int cols : {1, 3, 4, 6, 250, 257, 2560}) {
            const auto q = random_codes(rng, static_cast<size_t>(rows) * cols);
            const TernaryLookupMatrix w = pack_ternary_lookup(q.data(), rows, cols, 1.0f);
            expect_kernel_matches_reference(w, random_activations(rng, cols));
        }
}

TEST(TernaryLookup, LargestSumsStayExactAcrossTheWidening) {
    if (!have_avx512_bw()) GTEST_SKIP() << "no AVX-512 BW here";
    // Every weight +1 against -128, and alternating signs against +-128 and 127: each 16-bit
    // accumulator meets its bound of 40 pairs before widening, many times over (6,912 columns,
    // the 2B model's widest row, 1,152 pairs).
    const int rows = 40, cols = 6912;
    std::vector<int8_t> ones(static_cast<size_t>(rows) * cols, 1);
    std::vector<int8_t> lowest(cols, -128);
    expect_kernel_matches_reference(pack_ternary_lookup(ones.data(), rows, cols, 1.0f), lowest);
    std::vector<int8_t> alternating_q(static_cast<size_t>(rows) * cols), alternating_a(cols);
    for (size_t i = 0; i < alternating_q.size(); ++i) alternating_q[i] = (i % 2 == 0) ? 1 : -1;
    for (int c = 0; c < cols; ++c) alternating_a[c] = (c % 2 == 0) ? 127 : -128;
    expect_kernel_matches_reference(pack_ternary_lookup(alternating_q.data(), rows, cols, 1.0f), alternating_a);
}

TEST(TernaryLookup, TileRangesWriteOnlyTheirRows) {
    if (!have_avx512_bw()) GTEST_SKIP() << "no AVX-512 BW here";
    std::mt19937 rng(23);
    const int rows = 100, cols = 300;
    const auto q = random_codes(rng, static_cast<size_t>(rows) * cols);
    const auto a = random_activations(rng, cols);
    const TernaryLookupMatrix w = pack_ternary_lookup(q.data(), rows, cols, 1.0f);
    std::vector<int16_t> tables(ternary_lookup_table_entries(w));
    ternary_lookup_tables(w, a.data(), tables.data());
    std::vector<int32_t> dots(rows, -1);
    ternary_lookup_dots_avx512(w, tables.data(), 1, 3, dots.data());  // rows 32 to 95
    std::vector<int64_t> expected(rows);
    ternary_lookup_dots_reference(w, a.data(), expected.data());
    for (int r = 0; r < rows; ++r) {
        if (r >= 32 && r < 96)
            ASSERT_EQ(dots[r], expected[r]) << r;
        else
            ASSERT_EQ(dots[r], -1) << r;
    }
}

TEST(TernaryLookup, BadInputIsAnError) {
    std::vector<int8_t> q = {0, 1, 2, -1};
    EXPECT_THROW(pack_ternary_lookup(q.data(), 1, 4, 1.0f), Error);
    if (!have_avx512_bw()) return;
    q[2] = 0;
    const TernaryLookupMatrix w = pack_ternary_lookup(q.data(), 1, 4, 1.0f);
    std::vector<int16_t> tables(ternary_lookup_table_entries(w), 0);
    int32_t dot = 0;
    EXPECT_THROW(ternary_lookup_dots_avx512(w, tables.data(), 0, 2, &dot), Error);
    EXPECT_THROW(ternary_lookup_dots_avx512(w, tables.data(), 1, 0, &dot), Error);
}


TEST(TernaryLookup, UnpackedTilesHoldEachWeightsCode) {
    if (!have_lookup_product()) GTEST_SKIP() << "no AVX-512 BW and VL here";
    std::mt19937 rng(24);
    for (auto [rows, cols] : {std::pair{32, 6}, {45, 301}, {70, 2560}}) {
        const auto q = random_codes(rng, static_cast<size_t>(rows) * cols);
        const TernaryLookupMatrix w = pack_ternary_lookup(q.data(), rows, cols, 1.0f);
        const size_t stride = 40;  // wider than a tile: the bytes past 32 are left alone
        for (int t = 0; t < w.tiles(); ++t) {
            std::vector<int8_t> codes(static_cast<size_t>(3) * w.triples * stride, 99);
            ternary_lookup_unpack_tile(w, t, codes.data(), stride);
            for (int c = 0; c < 3 * w.triples; ++c)
                for (int lane = 0; lane < 40; ++lane) {
                    const int r = t * kLookupTileRows + lane;
                    const int8_t expected = lane >= kLookupTileRows ? 99
                                            : r < rows && c < cols  ? q[static_cast<size_t>(r) * cols + c]
                                                                    : 0;
                    ASSERT_EQ(codes[c * stride + lane], expected) << rows << "x" << cols << " tile " << t << " col " << c;
                }
        }
    }
}

// Float activations quantized as inference quantizes them (kernels/int8_rows.h).
Int8Rows random_activation_rows(std::mt19937& rng, int rows, int cols) {
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> x(static_cast<size_t>(rows) * cols);
    for (float& v : x) v = normal(rng);
    Int8Rows a;
    quantize_rows_int8(x.data(), rows, cols, a);
    return a;
}

TEST(TernaryLookup, ProductMatchesReferenceForOneAndManyRowsAndAnyRowRange) {
    if (!have_lookup_product()) GTEST_SKIP() << "no AVX-512 VNNI and VL here";
    std::mt19937 rng(25);
    for (auto [rows, cols] : {std::pair{1, 1}, {33, 7}, {100, 300}, {300, 2561}})
        for (int activation_rows : {1, 2, 5, 40}) {
            const auto q = random_codes(rng, static_cast<size_t>(rows) * cols);
            const TernaryLookupMatrix w = pack_ternary_lookup(q.data(), rows, cols, 0.037f);
            const Int8Rows x = random_activation_rows(rng, activation_rows, cols);
            std::vector<float> expected(static_cast<size_t>(activation_rows) * rows);
            ternary_lookup_matmul_reference(w, x, expected.data());
            std::vector<float> whole(expected.size(), -1.0f);
            ternary_lookup_matmul_rows(w, x, whole.data(), 0, rows);
            ASSERT_EQ(whole, expected) << rows << "x" << cols << ", " << activation_rows << " rows";
            // A range that starts and ends inside tiles writes its rows and no others.
            const int begin = rows / 3, end = rows - rows / 4;
            std::vector<float> part(expected.size(), -1.0f);
            ternary_lookup_matmul_rows(w, x, part.data(), begin, end);
            for (int r = 0; r < activation_rows; ++r)
                for (int o = 0; o < rows; ++o) {
                    const size_t i = static_cast<size_t>(r) * rows + o;
                    ASSERT_EQ(part[i], o >= begin && o < end ? expected[i] : -1.0f) << "row " << r << " column " << o;
                }
        }
}

// The 2-bit matrix's packing (a tile's bytes unpacked across its lanes) and the codes' packing
// give the same bytes, ragged shapes included: a last tile of fewer than 32 rows, rows that end
// inside a 256-weight block, inside a triple, or at a whole pair.
TEST(TernaryLookup, PackedFromTwoBitCodesAsFromTheCodes) {
    std::mt19937 rng(dqt::testing::test_seed());
    for (const auto& [rows, cols] : std::vector<std::pair<int, int>>{{96, 3072}, {45, 300}, {33, 257}, {1, 6}, {64, 7}}) {
        const auto q = random_codes(rng, static_cast<size_t>(rows) * cols);
        const TernaryLookupMatrix from_codes = pack_ternary_lookup(q.data(), rows, cols, 0.02f);
        const TernaryLookupMatrix from_two_bit = pack_ternary_lookup(pack_ternary(q.data(), rows, cols, 0.02f));
        ASSERT_EQ(from_two_bit.packed.size(), from_codes.packed.size()) << rows << "x" << cols;
        EXPECT_EQ(std::memcmp(from_two_bit.packed.data(), from_codes.packed.data(), from_codes.packed.size()), 0)
            << rows << "x" << cols;
        EXPECT_EQ(from_two_bit.gamma, 0.02f);
    }
}

TEST(TernaryLookup, SameWeightsAndSameBitsAsTheTwoBitLayout) {
    if (!have_lookup_product()) GTEST_SKIP() << "no AVX-512 VNNI and VL here";
    std::mt19937 rng(26);
    const int rows = 96, cols = 2560 + 512;
    const auto q = random_codes(rng, static_cast<size_t>(rows) * cols);
    const TernaryMatrix two_bit = pack_ternary(q.data(), rows, cols, 0.02f);
    const TernaryLookupMatrix from_two_bit = pack_ternary_lookup(two_bit);
    for (int activation_rows : {1, 3, 128}) {
        const Int8Rows x = random_activation_rows(rng, activation_rows, cols);
        std::vector<float> expected(static_cast<size_t>(activation_rows) * rows), got(expected.size());
        ternary_matmul_rows(two_bit, x, expected.data(), 0, rows, best_integer_isa());
        ternary_lookup_matmul_rows(from_two_bit, x, got.data(), 0, rows);
        EXPECT_EQ(got, expected) << activation_rows << " rows";
    }
}

TEST(TernaryLookup, ProductRefusesOtherShapesAndRanges) {
    if (!have_lookup_product()) GTEST_SKIP() << "no AVX-512 VNNI and VL here";
    std::mt19937 rng(27);
    const auto q = random_codes(rng, 40 * 12);
    const TernaryLookupMatrix w = pack_ternary_lookup(q.data(), 40, 12, 1.0f);
    std::vector<float> out(2 * 40);
    EXPECT_THROW(ternary_lookup_matmul_rows(w, random_activation_rows(rng, 2, 13), out.data(), 0, 40), Error);
    const Int8Rows x = random_activation_rows(rng, 2, 12);
    EXPECT_THROW(ternary_lookup_matmul_rows(w, x, out.data(), 0, 41), Error);
    EXPECT_THROW(ternary_lookup_matmul_rows(w, x, out.data(), 20, 10), Error);
    EXPECT_THROW(ternary_lookup_matmul_rows(w, x, out.data(), -1, 10), Error);
    std::vector<int8_t> codes(3 * w.triples * 32);
    EXPECT_THROW(ternary_lookup_unpack_tile(w, 2, codes.data(), 32), Error);
    EXPECT_THROW(ternary_lookup_unpack_tile(w, 0, codes.data(), 16), Error);
}

}  // namespace
}  // namespace dqt
