// Ternary x int8 inference kernels: every instruction-set path against the slow reference on
// fresh random shapes, ragged ones included (the model-level checks: tests/test_inference.cpp).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <tuple>
#include <vector>

#include "core/error.h"
#include "kernels/int8_matmul.h"
#include "kernels/ternary_matmul.h"
#include "kernels/ternary_tiles.h"
#include "quant/codes.h"
#include "test_helpers.h"

namespace dqt {
namespace {

std::vector<int8_t> random_codes(std::mt19937& rng, int count) { return testing::random_int8(rng, count, -1, 1); }

std::vector<float> random_rows(std::mt19937& rng, int count) {
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> x(count);
    for (auto& v : x) v = normal(rng);
    return x;
}

TEST(TernaryMatmul, PackedCodesRoundTripIncludingRaggedColumns) {
    std::mt19937 rng(11);
    for (int cols : {1, 7, 255, 256, 257, 688, 1024}) {
        const int rows = 3;
        const auto q = random_codes(rng, rows * cols);
        const TernaryMatrix w = pack_ternary(q.data(), rows, cols, 0.5f);
        EXPECT_EQ(w.padded_cols % kTernaryBlock, 0);
        for (int r = 0; r < rows; ++r)
            for (int c = 0; c < cols; ++c) ASSERT_EQ(ternary_code_at(w, r, c), q[r * cols + c]) << cols << " " << c;
        // The padding holds zero weights, so it adds nothing to a product.
        for (int r = 0; r < rows; ++r)
            for (int c = cols; c < w.padded_cols; ++c) ASSERT_EQ(ternary_code_at(w, r, c), 0);
    }
}

TEST(TernaryMatmul, LayoutIsLlamaCppTq2Codes) {
    // TQ2_0: in each 32-byte half of a 256-weight block, byte m holds weight m + 32n at bits 2n.
    std::vector<int8_t> q(256, 0);
    q[0] = 1;     // half 0, byte 0, bits 0-1: code 2
    q[32] = -1;   // half 0, byte 0, bits 2-3: code 0
    q[128 + 5 + 96] = 1;  // half 1, byte 5, bits 6-7: code 2
    const TernaryMatrix w = pack_ternary(q.data(), 1, 256, 1.0f);
    EXPECT_EQ(w.row(0)[0], 0x02 | (0x0 << 2) | (0x1 << 4) | (0x1 << 6));
    EXPECT_EQ(w.row(0)[32 + 5], 0x1 | (0x1 << 2) | (0x1 << 4) | (0x2 << 6));
}

TEST(TernaryMatmul, QuantizedRowsRecoverAnAlreadyQuantizedRowExactly) {
    std::mt19937 rng(5);
    const int cols = 300;
    auto x = random_rows(rng, cols);
    Int8Rows first;
    quantize_rows_int8(x.data(), 1, cols, first);
    std::vector<float> dequantized(cols);
    for (int c = 0; c < cols; ++c) dequantized[c] = first.row(0)[c] / first.scales[0];
    Int8Rows second;
    quantize_rows_int8(dequantized.data(), 1, cols, second);
    for (int c = 0; c < cols; ++c) ASSERT_EQ(second.row(0)[c], first.row(0)[c]);
    int32_t sum = 0;
    for (int c = 0; c < cols; ++c) sum += first.row(0)[c];
    EXPECT_EQ(first.sums[0], sum);
    for (int c = cols; c < first.padded_cols; ++c) EXPECT_EQ(first.row(0)[c], 0);
}

TEST(TernaryMatmul, EveryPathMatchesTheReferenceBitForBitOnRandomShapes) {
    const uint64_t seed = dqt::testing::test_seed();
    SCOPED_TRACE(dqt::testing::seed_trace(seed));
    std::mt19937 rng(static_cast<uint32_t>(seed));
    std::uniform_int_distribution<int> dim(1, 700), batch(1, 20);  // decode, small batches, prompts
    int paths_run = 0;
    for (int trial = 0; trial < 24; ++trial) {
        const int rows = dim(rng), cols = dim(rng), n = batch(rng);
        const auto q = random_codes(rng, rows * cols);
        const TernaryMatrix w = pack_ternary(q.data(), rows, cols, 0.0173f);
        const auto x = random_rows(rng, n * cols);
        Int8Rows a;
        quantize_rows_int8(x.data(), n, cols, a);
        std::vector<float> expected(static_cast<size_t>(n) * rows), got(expected.size());
        ternary_matmul_reference(w, a, expected.data());
        for (IntegerIsa isa : {IntegerIsa::scalar, IntegerIsa::avx2, IntegerIsa::avx512_vnni, IntegerIsa::avx512_amx}) {
            if (!integer_isa_supported(isa)) continue;
            ++paths_run;
            std::fill(got.begin(), got.end(), NAN);
            ternary_matmul(w, a, got.data(), isa);
            for (size_t i = 0; i < got.size(); ++i)
                ASSERT_EQ(got[i], expected[i]) << integer_isa_name(isa) << " rows " << rows << " cols " << cols
                                               << " batch " << n << " at " << i;
        }
    }
    EXPECT_GE(paths_run, 24);  // at least the scalar path every trial
}

// Codes q (rows, cols) times n activation rows x on the given path, against the reference, bit
// for bit.
void expect_product_exact(const std::vector<int8_t>& q, const std::vector<float>& x, int rows, int cols, int n,
                          float gamma, IntegerIsa isa) {
    const TernaryMatrix w = pack_ternary(q.data(), rows, cols, gamma);
    Int8Rows a;
    quantize_rows_int8(x.data(), n, cols, a);
    const size_t count = static_cast<size_t>(n) * rows;
    std::vector<float> expected(count), got(count, NAN);
    ternary_matmul_reference(w, a, expected.data());
    ternary_matmul(w, a, got.data(), isa);
    for (size_t i = 0; i < got.size(); ++i)
        ASSERT_EQ(got[i], expected[i]) << integer_isa_name(isa) << " rows " << rows << " cols " << cols << " batch "
                                       << n << " at " << i;
}

void expect_vnni_product_exact(std::mt19937& rng, int rows, int cols, int n, float gamma) {
    const auto q = random_codes(rng, rows * cols);
    expect_product_exact(q, random_rows(rng, n * cols), rows, cols, n, gamma, IntegerIsa::avx512_vnni);
}

// A prompt's many rows on AVX2 run the unpacked-code tiles (ternary_prompt_rows_avx2): ragged
// shapes whose rows span several of its K blocks (2,016 weights each) and tiles cut at both
// edges, then every code 1 or -1 against activations of +-127 over long rows (each block's 16-bit
// sums at their largest), against the reference, bit for bit.
TEST(TernaryMatmul, AvxTwoPromptTilesMatchTheReference) {
    if (!integer_isa_supported(IntegerIsa::avx2)) GTEST_SKIP() << "no AVX2 here";
    const uint64_t seed = dqt::testing::test_seed();
    SCOPED_TRACE(dqt::testing::seed_trace(seed));
    std::mt19937 rng(static_cast<uint32_t>(seed));
    for (auto [rows, cols, n] : {std::tuple{37, 4500, 23}, {5, 2017, 40}, {131, 300, 17}, {1, 6000, 18}}) {
        const auto q = random_codes(rng, rows * cols);
        expect_product_exact(q, random_rows(rng, n * cols), rows, cols, n, 0.029f, IntegerIsa::avx2);
        if (::testing::Test::HasFatalFailure()) return;
    }
    const int rows = 7, cols = 4400, n = 21;
    std::vector<float> extremes(static_cast<size_t>(n) * cols, 1.0f);
    std::fill(extremes.begin() + 3 * cols, extremes.begin() + 9 * cols, -1.0f);
    for (const int8_t code : {int8_t{1}, int8_t{-1}}) {
        expect_product_exact(std::vector<int8_t>(static_cast<size_t>(rows) * cols, code), extremes, rows, cols, n, 0.5f,
                             IntegerIsa::avx2);
        if (::testing::Test::HasFatalFailure()) return;
    }
}

// The small-batch kernels (kernels/ternary_tiles.cpp) split their rows into groups (AVX-512: 1,
// 3 or 4 rows; AVX2: 4 at a time; AMX: one tile of them all): every row count they serve, so
// every split, against the reference, on random shapes and at the 16-bit partial sums' extremes
// (every code 1, every activation +-127, long rows).
TEST(TernaryMatmul, SmallBatchKernelsMatchTheReferenceAtEveryRowCount) {
    const uint64_t seed = dqt::testing::test_seed();
    SCOPED_TRACE(dqt::testing::seed_trace(seed));
    std::mt19937 rng(static_cast<uint32_t>(seed));
    std::uniform_int_distribution<int> dim(1, 600);
    bool ran = false;
    for (const IntegerIsa isa : {IntegerIsa::avx2, IntegerIsa::avx512_vnni, IntegerIsa::avx512_amx}) {
        if (!integer_isa_supported(isa)) continue;
        ran = true;
        for (int n = 1; n <= kSmallBatchMaxRows; ++n) {
            const int rows = dim(rng), cols = dim(rng);
            const auto q = random_codes(rng, rows * cols);
            expect_product_exact(q, random_rows(rng, n * cols), rows, cols, n, 0.031f, isa);
            if (::testing::Test::HasFatalFailure()) return;
        }
        const int rows = 20, cols = 2600, n = 6;
        std::vector<float> extremes(static_cast<size_t>(n) * cols, 1.0f);
        std::fill(extremes.begin() + 2 * cols, extremes.begin() + 4 * cols, -1.0f);
        for (const int8_t code : {int8_t{1}, int8_t{-1}}) {
            expect_product_exact(std::vector<int8_t>(static_cast<size_t>(rows) * cols, code), extremes, rows, cols, n,
                                 0.5f, isa);
            if (::testing::Test::HasFatalFailure()) return;
        }
    }
    if (!ran) GTEST_SKIP() << "no AVX2 here";
}

// The AMX kernel passes 32 weight rows at a time (two tiles of 16), whose second tile
// ternary_matmul's 16-row tasks never reach: whole ranges as the inference session hands one
// thread, cut at random places, every batch size it serves, against the reference; columns
// outside the range stay as they were.
TEST(TernaryMatmul, AmxSmallBatchesMatchTheReferenceOverRowRanges) {
    if (!integer_isa_supported(IntegerIsa::avx512_amx)) GTEST_SKIP() << "no AMX here";
    const uint64_t seed = dqt::testing::test_seed();
    SCOPED_TRACE(dqt::testing::seed_trace(seed));
    std::mt19937 rng(static_cast<uint32_t>(seed));
    std::uniform_int_distribution<int> dim(1, 300);
    for (int n = kAmxMinRows; n <= kSmallBatchMaxRows; ++n) {
        const int rows = dim(rng), cols = dim(rng) * 3;
        const int row_begin = std::uniform_int_distribution<int>(0, rows - 1)(rng);
        const int row_end = std::uniform_int_distribution<int>(row_begin + 1, rows)(rng);
        const auto q = random_codes(rng, rows * cols);
        const TernaryMatrix w = pack_ternary(q.data(), rows, cols, 0.023f);
        const auto x = random_rows(rng, n * cols);
        Int8Rows a;
        quantize_rows_int8(x.data(), n, cols, a);
        std::vector<float> expected(static_cast<size_t>(n) * rows), got(expected.size(), NAN);
        ternary_matmul_reference(w, a, expected.data());
        ternary_matmul_rows(w, a, got.data(), row_begin, row_end, IntegerIsa::avx512_amx);
        for (int r = 0; r < n; ++r)
            for (int o = 0; o < rows; ++o) {
                const size_t i = static_cast<size_t>(r) * rows + o;
                if (o >= row_begin && o < row_end)
                    ASSERT_EQ(got[i], expected[i]) << "batch " << n << " rows " << rows << " cols " << cols << " at " << r
                                                   << ", " << o;
                else
                    ASSERT_TRUE(std::isnan(got[i])) << "batch " << n << ": column " << o << " outside the range written";
            }
    }
}

// A prompt's many rows go to oneDNN's int8 GEMM over unpacked codes (where the int8 product's
// rule sends them): ragged shapes, against the reference, bit for bit.
TEST(TernaryMatmul, PromptSizedBatchesThroughOneDnnMatchTheReference) {
    if (!integer_isa_supported(IntegerIsa::avx512_vnni)) GTEST_SKIP() << "no AVX-512 VNNI here";
    const uint64_t seed = dqt::testing::test_seed();
    SCOPED_TRACE(dqt::testing::seed_trace(seed));
    std::mt19937 rng(static_cast<uint32_t>(seed));
    for (auto [rows, cols, n] : {std::tuple{300, 2600, 128}, {45, 7000, 40}, {1100, 1024, 300}}) {
        ASSERT_TRUE(int8_matmul_uses_onednn(n, int8_padded_cols(cols), IntegerIsa::avx512_vnni)) << rows << "x" << cols;
        expect_vnni_product_exact(rng, rows, cols, n, 0.029f);
        if (::testing::Test::HasFatalFailure()) return;
    }
}

// Each decode kernel this CPU runs (AVX2, AVX-512 VNNI) against the reference, bit for bit,
// on one activation row.
void expect_decode_kernels_exact(const TernaryMatrix& w, const Int8Rows& a, const std::string& what) {
    std::vector<float> expected(static_cast<size_t>(w.rows)), got(expected.size());
    ternary_matmul_reference(w, a, expected.data());
    for (IntegerIsa isa : {IntegerIsa::avx2, IntegerIsa::avx512_vnni}) {
        if (!integer_isa_supported(isa)) continue;
        std::fill(got.begin(), got.end(), NAN);
        ternary_matmul(w, a, got.data(), isa);
        for (int r = 0; r < w.rows; ++r) ASSERT_EQ(got[r], expected[r]) << integer_isa_name(isa) << " " << what << " row " << r;
    }
}

// Decode, one activation row, has kernels of its own (kernels/ternary_tiles.cpp): on random
// ragged shapes, every instruction set's against the reference.
TEST(TernaryMatmul, DecodeKernelsMatchTheReferenceOnRandomShapes) {
    const uint64_t seed = dqt::testing::test_seed();
    SCOPED_TRACE(dqt::testing::seed_trace(seed));
    std::mt19937 rng(static_cast<uint32_t>(seed));
    std::uniform_int_distribution<int> dim(1, 1200);
    for (int trial = 0; trial < 16; ++trial) {
        const int rows = dim(rng), cols = dim(rng);
        const auto q = random_codes(rng, rows * cols);
        const TernaryMatrix w = pack_ternary(q.data(), rows, cols, 0.027f);
        const auto x = random_rows(rng, cols);
        Int8Rows a;
        quantize_rows_int8(x.data(), 1, cols, a);
        expect_decode_kernels_exact(w, a, "rows " + std::to_string(rows) + " cols " + std::to_string(cols));
    }
}

// The decode kernels' sums at the largest products (every code +1, every activation +-127)
// over a long row: the AVX-512 one scales each code position's products by up to 4^3 and
// shifts them back once per row, the AVX2 one sums four positions in 16-bit lanes; both must
// stay exact.
TEST(TernaryMatmul, DecodeKernelIsExactAtTheLargestProductsOverLongRows) {
    if (!integer_isa_supported(IntegerIsa::avx2)) GTEST_SKIP() << "no AVX2 here";
    const uint64_t seed = dqt::testing::test_seed();
    SCOPED_TRACE(dqt::testing::seed_trace(seed));
    std::mt19937 rng(static_cast<uint32_t>(seed));
    const int rows = 19, cols = 16384 + 77;
    std::vector<int8_t> q(static_cast<size_t>(rows) * cols);
    for (int r = 0; r < rows; ++r)  // all +1, all -1, or random codes, by row
        for (int c = 0; c < cols; ++c)
            q[static_cast<size_t>(r) * cols + c] =
                static_cast<int8_t>(r % 3 == 0 ? 1 : r % 3 == 1 ? -1 : std::uniform_int_distribution<int>(-1, 1)(rng));
    const TernaryMatrix w = pack_ternary(q.data(), rows, cols, 0.02f);
    for (const bool same_sign : {true, false}) {
        std::vector<float> x(cols, 3.0f);
        if (!same_sign)
            for (auto& v : x) v = std::bernoulli_distribution(0.5)(rng) ? 3.0f : -3.0f;
        Int8Rows a;
        quantize_rows_int8(x.data(), 1, cols, a);
        expect_decode_kernels_exact(w, a, same_sign ? "same sign" : "mixed signs");
    }
}

TEST(TernaryMatmul, ReferenceEqualsTheFloatProductOfDequantizedOperands) {
    // Independent of the packing: sum_i (q * gamma) * (a / s) in double.
    std::mt19937 rng(3);
    const int rows = 9, cols = 333, n = 3;
    const auto q = random_codes(rng, rows * cols);
    const float gamma = 0.021f;
    const TernaryMatrix w = pack_ternary(q.data(), rows, cols, gamma);
    const auto x = random_rows(rng, n * cols);
    Int8Rows a;
    quantize_rows_int8(x.data(), n, cols, a);
    std::vector<float> out(static_cast<size_t>(n) * rows);
    ternary_matmul(w, a, out.data());
    for (int r = 0; r < n; ++r) {
        for (int o = 0; o < rows; ++o) {
            double sum = 0.0;
            for (int c = 0; c < cols; ++c)
                sum += (q[o * cols + c] * static_cast<double>(gamma)) * (a.row(r)[c] / static_cast<double>(a.scales[r]));
            EXPECT_NEAR(out[r * rows + o], sum, 1e-6 * (1.0 + std::fabs(sum)));
        }
    }
}

TEST(TernaryMatmul, RefusesMismatchedShapesAndNonTernaryCodes) {
    std::vector<int8_t> q(8, 0);
    q[3] = 2;
    EXPECT_THROW(pack_ternary(q.data(), 2, 4, 1.0f), Error);
    q[3] = 1;
    const TernaryMatrix w = pack_ternary(q.data(), 2, 4, 1.0f);
    std::vector<float> x(5, 1.0f), out(2);
    Int8Rows a;
    quantize_rows_int8(x.data(), 1, 5, a);
    EXPECT_THROW(ternary_matmul(w, a, out.data()), Error);
}

}  // namespace
}  // namespace dqt
