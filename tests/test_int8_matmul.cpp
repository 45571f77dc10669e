// Int8 x int8 inference kernels: every instruction-set path against the slow reference, bit
// for bit, on random ragged shapes and on the extreme values that would saturate a 16-bit
// intermediate; the reference against the float64 product of the dequantized operands.
//
// Random inputs come from a fixed seed, so a failure reproduces; DQT_TEST_SEED=<n> picks
// another. Every test that draws prints its seed on failure.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "kernels/int8_matmul.h"
#include "test_helpers.h"

namespace dqt {
namespace {

constexpr IntegerIsa kAllIsas[] = {IntegerIsa::scalar, IntegerIsa::avx2, IntegerIsa::avx512_vnni, IntegerIsa::avx512_amx};

std::vector<int8_t> random_codes(std::mt19937& rng, size_t count, int low = -128, int high = 127) {
    return testing::random_int8(rng, count, low, high);
}

std::vector<float> random_floats(std::mt19937& rng, size_t count) {
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> x(count);
    for (auto& v : x) v = normal(rng);
    return x;
}

// Activation rows built by hand from (rows, cols) codes, for values the quantizer never
// produces (-128): the kernels must be exact for any int8, not only its output.
Int8Rows rows_from_codes(const std::vector<int8_t>& a, int rows, int cols, float scale) {
    Int8Rows x;
    x.rows = rows;
    x.cols = cols;
    x.padded_cols = int8_padded_cols(cols);
    x.values = Array<int8_t>(MemCategory::scratch, static_cast<size_t>(rows) * x.padded_cols);
    x.scales.assign(rows, scale);
    x.sums.assign(rows, 0);
    for (int r = 0; r < rows; ++r) {
        for (int c = 0; c < cols; ++c) {
            x.values[static_cast<size_t>(r) * x.padded_cols + c] = a[static_cast<size_t>(r) * cols + c];
            x.sums[r] += a[static_cast<size_t>(r) * cols + c];
        }
    }
    return x;
}

// Every supported path, through int8_matmul and through int8_matmul_rows over all rows,
// equals the reference bit for bit. Returns the number of paths run.
int expect_every_path_matches_reference(const Int8Matrix& w, const Int8Rows& x, const std::string& what) {
    std::vector<float> expected(static_cast<size_t>(x.rows) * w.rows), got(expected.size());
    int8_matmul_reference(w, x, expected.data());
    int paths_run = 0;
    for (IntegerIsa isa : kAllIsas) {
        if (!integer_isa_supported(isa)) continue;
        ++paths_run;
        for (bool whole : {true, false}) {
            std::fill(got.begin(), got.end(), NAN);
            if (whole)
                int8_matmul(w, x, got.data(), isa);
            else
                int8_matmul_rows(w, x, got.data(), 0, w.rows, isa);
            for (size_t i = 0; i < got.size(); ++i) {
                EXPECT_EQ(got[i], expected[i]) << integer_isa_name(isa) << (whole ? " int8_matmul " : " int8_matmul_rows ")
                                               << what << " at " << i;
                if (got[i] != expected[i]) return paths_run;  // one message per failing case
            }
        }
    }
    return paths_run;
}

std::string shape_text(int rows, int cols, int n) {
    return "weights " + std::to_string(rows) + " x " + std::to_string(cols) + ", activation rows " + std::to_string(n);
}

TEST(Int8Matmul, PackingKeepsTheCodesPadsWithZerosAndSumsEachRow) {
    const uint64_t seed = dqt::testing::test_seed();
    SCOPED_TRACE(dqt::testing::seed_trace(seed));
    std::mt19937 rng(static_cast<uint32_t>(seed));
    for (int cols : {1, 63, 256, 257, 700}) {
        const int rows = 3;
        const auto q = random_codes(rng, static_cast<size_t>(rows) * cols);
        const Int8Matrix w = pack_int8(q.data(), rows, cols, 0.25f);
        EXPECT_EQ(w.padded_cols, int8_padded_cols(cols));
        EXPECT_EQ(w.scale, 0.25f);
        EXPECT_EQ(w.values.category(), MemCategory::weights);
        for (int r = 0; r < rows; ++r) {
            int32_t sum = 0;
            for (int c = 0; c < cols; ++c) {
                ASSERT_EQ(w.row(r)[c], q[static_cast<size_t>(r) * cols + c]);
                sum += q[static_cast<size_t>(r) * cols + c];
            }
            for (int c = cols; c < w.padded_cols; ++c) ASSERT_EQ(w.row(r)[c], 0);
            EXPECT_EQ(w.row_sums[r], sum);
        }
    }
}

TEST(Int8Matmul, EveryPathMatchesTheReferenceBitForBitOnRandomRaggedShapes) {
    const uint64_t seed = dqt::testing::test_seed();
    SCOPED_TRACE(dqt::testing::seed_trace(seed));
    std::mt19937 rng(static_cast<uint32_t>(seed));
    // Columns around the vector widths (16, 32, 64) and the 256 padding, and beyond 256.
    const int fixed_cols[] = {1, 15, 16, 17, 31, 32, 33, 63, 64, 65, 255, 256, 257, 300, 511, 512, 513, 1000, 1100};
    std::uniform_int_distribution<int> weight_rows(1, 37), activation_rows(1, 9), any_cols(1, 1300);
    std::uniform_real_distribution<float> scale(1e-3f, 0.1f);
    int paths_run = 0, trials = 0;
    for (int trial = 0; trial < 40; ++trial) {
        const int rows = weight_rows(rng), n = activation_rows(rng);
        const int cols = trial < static_cast<int>(std::size(fixed_cols)) ? fixed_cols[trial] : any_cols(rng);
        // Codes of a random bit width 2..8, as the DQT grids produce them.
        const int bits = std::uniform_int_distribution<int>(2, 8)(rng);
        const auto q = random_codes(rng, static_cast<size_t>(rows) * cols, -(1 << (bits - 1)), (1 << (bits - 1)) - 1);
        const Int8Matrix w = pack_int8(q.data(), rows, cols, scale(rng));
        // Activations both from the quantizer and as arbitrary int8 codes (-128 included).
        const auto x = random_floats(rng, static_cast<size_t>(n) * cols);
        Int8Rows quantized;
        quantize_rows_int8(x.data(), n, cols, quantized);
        const Int8Rows arbitrary = rows_from_codes(random_codes(rng, static_cast<size_t>(n) * cols), n, cols, scale(rng));
        const std::string what = shape_text(rows, cols, n) + ", " + std::to_string(bits) + "-bit weights";
        paths_run += expect_every_path_matches_reference(w, quantized, what + ", quantized activations");
        paths_run += expect_every_path_matches_reference(w, arbitrary, what + ", arbitrary int8 activations");
        trials += 2;
    }
    EXPECT_GE(paths_run, trials);  // at least the scalar path every time
}

// |q| = |a| = 128 gives 16-bit pairs of 32768 (one past int16); q = -128 with |a| = 127 gives
// 32512, the largest pair the AVX2 sign trick takes; in the VNNI form (a + 128) * q reaches
// 255 * -128 per product, and at the widest row its int32 sums come within 2^23 of
// overflowing. Every path must still be exact.
TEST(Int8Matmul, ExtremeValuesDoNotSaturateAnyPath) {
    const uint64_t seed = dqt::testing::test_seed();
    SCOPED_TRACE(dqt::testing::seed_trace(seed));
    std::mt19937 rng(static_cast<uint32_t>(seed));
    for (int cols : {1, 32, 100, 256, 1000, 4096, kInt8MaxCols}) {
        const int rows = cols == kInt8MaxCols ? 5 : 7, n = 3;
        const std::vector<int8_t> all_min(static_cast<size_t>(rows) * cols, -128);
        const Int8Matrix w = pack_int8(all_min.data(), rows, cols, 1.0f);
        for (int fill : {-128, -127, 127}) {
            const Int8Rows x =
                rows_from_codes(std::vector<int8_t>(static_cast<size_t>(n) * cols, static_cast<int8_t>(fill)), n, cols, 1.0f);
            std::vector<float> out(static_cast<size_t>(n) * w.rows);
            int8_matmul_reference(w, x, out.data());
            // The closed form, exact in float: cols * -128 * fill is a small integer times a power of two.
            const float exact = static_cast<float>(static_cast<int64_t>(cols) * -128 * fill);
            for (float v : out) ASSERT_EQ(v, exact) << "reference, cols " << cols << ", activations " << fill;
            expect_every_path_matches_reference(w, x, shape_text(rows, cols, n) + ", activations all " + std::to_string(fill));
        }
        // Random mixes of the extremes: every sign combination of 128 x 128 and 127 x 128 pairs.
        const auto q = random_codes(rng, static_cast<size_t>(rows) * cols, -1, 0);
        std::vector<int8_t> extremes(q.size());
        for (size_t i = 0; i < q.size(); ++i) extremes[i] = q[i] < 0 ? -128 : 127;
        const Int8Matrix mixed = pack_int8(extremes.data(), rows, cols, 1.0f);
        const auto pick = random_codes(rng, static_cast<size_t>(n) * cols, -1, 0);
        std::vector<int8_t> a(pick.size());
        for (size_t i = 0; i < pick.size(); ++i) a[i] = pick[i] < 0 ? -128 : 127;
        expect_every_path_matches_reference(mixed, rows_from_codes(a, n, cols, 1.0f),
                                            shape_text(rows, cols, n) + ", mixed extremes");
    }
}

// A prompt's many activation rows go to oneDNN's int8 GEMM on the VNNI path (weight rows in
// blocks of 512, a ragged last block), whole and by row range; bit for bit the reference's, on
// random codes and on the extremes that would saturate 16-bit pair sums.
TEST(Int8Matmul, PromptSizedBatchesThroughOneDnnMatchTheReference) {
    if (!integer_isa_supported(IntegerIsa::avx512_vnni)) GTEST_SKIP() << "this CPU lacks AVX-512 VNNI";
    const uint64_t seed = dqt::testing::test_seed();
    SCOPED_TRACE(dqt::testing::seed_trace(seed));
    std::mt19937 rng(static_cast<uint32_t>(seed));
    struct Shape {
        int rows, cols, n;
    };
    for (const Shape& shape : {Shape{600, 2560, 128}, Shape{37, 6912, 40}, Shape{530, 1000, 270}}) {
        const std::string what = shape_text(shape.rows, shape.cols, shape.n);
        ASSERT_TRUE(int8_matmul_uses_onednn(shape.n, int8_padded_cols(shape.cols), IntegerIsa::avx512_vnni)) << what;
        const auto q = random_codes(rng, static_cast<size_t>(shape.rows) * shape.cols);
        const Int8Matrix w = pack_int8(q.data(), shape.rows, shape.cols, 0.02f);
        const Int8Rows x = rows_from_codes(random_codes(rng, static_cast<size_t>(shape.n) * shape.cols), shape.n,
                                           shape.cols, 0.5f);
        EXPECT_GE(expect_every_path_matches_reference(w, x, what), 1);
        // A range that starts and ends inside oneDNN's blocks writes only its columns.
        const int begin = shape.rows / 3, end = shape.rows - 5;
        std::vector<float> expected(static_cast<size_t>(shape.n) * shape.rows), got(expected.size(), NAN);
        int8_matmul_reference(w, x, expected.data());
        int8_matmul_rows(w, x, got.data(), begin, end, IntegerIsa::avx512_vnni);
        for (int r = 0; r < shape.n; ++r) {
            for (int o = 0; o < shape.rows; ++o) {
                const float v = got[static_cast<size_t>(r) * shape.rows + o];
                if (o >= begin && o < end) {
                    ASSERT_EQ(v, expected[static_cast<size_t>(r) * shape.rows + o]) << what << ", row " << r << ", output " << o;
                } else {
                    ASSERT_TRUE(std::isnan(v)) << what << ": output " << o << " outside the range was written";
                }
            }
        }
    }
    // The widest rows at the extremes: -128 weights against -128 and 127 activations.
    const int cols = kInt8MaxCols, n = 4;
    ASSERT_TRUE(int8_matmul_uses_onednn(n, int8_padded_cols(cols), IntegerIsa::avx512_vnni));
    const Int8Matrix w = pack_int8(std::vector<int8_t>(static_cast<size_t>(3) * cols, -128).data(), 3, cols, 1.0f);
    for (int fill : {-128, 127}) {
        const Int8Rows x =
            rows_from_codes(std::vector<int8_t>(static_cast<size_t>(n) * cols, static_cast<int8_t>(fill)), n, cols, 1.0f);
        std::vector<float> out(static_cast<size_t>(n) * w.rows);
        int8_matmul(w, x, out.data(), IntegerIsa::avx512_vnni);
        for (float v : out) ASSERT_EQ(v, static_cast<float>(static_cast<int64_t>(cols) * -128 * fill)) << "activations " << fill;
    }
}

TEST(Int8Matmul, ReferenceEqualsTheFloat64ProductOfDequantizedOperands) {
    // Independent of the packing and of the integer sums: sum_i (q * scale) * (a / s) in double.
    const uint64_t seed = dqt::testing::test_seed();
    SCOPED_TRACE(dqt::testing::seed_trace(seed));
    std::mt19937 rng(static_cast<uint32_t>(seed));
    const int rows = 11, cols = 777, n = 4;
    const auto q = random_codes(rng, static_cast<size_t>(rows) * cols);
    const float scale = 0.0123f;
    const Int8Matrix w = pack_int8(q.data(), rows, cols, scale);
    const auto x = random_floats(rng, static_cast<size_t>(n) * cols);
    Int8Rows a;
    quantize_rows_int8(x.data(), n, cols, a);
    std::vector<float> out(static_cast<size_t>(n) * rows);
    int8_matmul_reference(w, a, out.data());
    for (int r = 0; r < n; ++r) {
        for (int o = 0; o < rows; ++o) {
            double sum = 0.0;
            for (int c = 0; c < cols; ++c)
                sum += (q[static_cast<size_t>(o) * cols + c] * static_cast<double>(scale)) *
                       (a.row(r)[c] / static_cast<double>(a.scales[r]));
            // Two float roundings (the factor, the product) and the integer sum's conversion.
            EXPECT_NEAR(out[static_cast<size_t>(r) * rows + o], sum, 4.0 * std::numeric_limits<float>::epsilon() * std::fabs(sum) + 1e-30)
                << "activation row " << r << ", weight row " << o;
        }
    }
}

TEST(Int8Matmul, RowRangeWritesOnlyThoseOutputs) {
    const uint64_t seed = dqt::testing::test_seed();
    SCOPED_TRACE(dqt::testing::seed_trace(seed));
    std::mt19937 rng(static_cast<uint32_t>(seed));
    const int rows = 37, cols = 300, n = 5;
    const auto q = random_codes(rng, static_cast<size_t>(rows) * cols);
    const Int8Matrix w = pack_int8(q.data(), rows, cols, 0.05f);
    const Int8Rows x = rows_from_codes(random_codes(rng, static_cast<size_t>(n) * cols), n, cols, 3.0f);
    std::vector<float> expected(static_cast<size_t>(n) * rows), got(expected.size());
    int8_matmul_reference(w, x, expected.data());
    const float sentinel = -12345.0f;  // not a value any output takes: outputs are multiples of 0.05 / 3
    for (IntegerIsa isa : kAllIsas) {
        if (!integer_isa_supported(isa)) continue;
        for (auto [begin, end] : {std::pair{0, 1}, std::pair{3, 9}, std::pair{5, 37}, std::pair{17, 17}, std::pair{36, 37}}) {
            std::fill(got.begin(), got.end(), sentinel);
            int8_matmul_rows(w, x, got.data(), begin, end, isa);
            for (int r = 0; r < n; ++r) {
                for (int o = 0; o < rows; ++o) {
                    const size_t at = static_cast<size_t>(r) * rows + o;
                    if (o >= begin && o < end)
                        ASSERT_EQ(got[at], expected[at]) << integer_isa_name(isa) << " [" << begin << ", " << end << ") row " << r << " o " << o;
                    else
                        ASSERT_EQ(got[at], sentinel) << integer_isa_name(isa) << " [" << begin << ", " << end << ") wrote row " << r << " o " << o;
                }
            }
        }
    }
}

TEST(Int8Matmul, RefusesMismatchedShapesRangesAndTooWideRows) {
    const std::vector<int8_t> q(2 * 4, 1);
    const Int8Matrix w = pack_int8(q.data(), 2, 4, 1.0f);
    std::vector<float> x(5, 1.0f), out(2, 0.0f);
    Int8Rows a;
    quantize_rows_int8(x.data(), 1, 5, a);
    EXPECT_THROW(int8_matmul(w, a, out.data()), Error);
    EXPECT_THROW(int8_matmul_reference(w, a, out.data()), Error);
    for (IntegerIsa isa : kAllIsas) {
        if (!integer_isa_supported(isa)) {
            EXPECT_THROW(int8_matmul(w, a, out.data(), isa), Error);
            continue;
        }
        EXPECT_THROW(int8_matmul(w, a, out.data(), isa), Error);
        EXPECT_THROW(int8_matmul_rows(w, a, out.data(), 0, 2, isa), Error);
    }
    Int8Rows fits;
    quantize_rows_int8(x.data(), 1, 4, fits);
    EXPECT_NO_THROW(int8_matmul_rows(w, fits, out.data(), 0, 2, best_integer_isa()));
    EXPECT_THROW(int8_matmul_rows(w, fits, out.data(), -1, 1, best_integer_isa()), Error);
    EXPECT_THROW(int8_matmul_rows(w, fits, out.data(), 0, 3, best_integer_isa()), Error);
    EXPECT_THROW(int8_matmul_rows(w, fits, out.data(), 2, 1, best_integer_isa()), Error);
    const std::vector<int8_t> wide(kInt8MaxCols + 1, 0);
    EXPECT_THROW(pack_int8(wide.data(), 1, kInt8MaxCols + 1, 1.0f), Error);
}

}  // namespace
}  // namespace dqt
