// Weight codes, rounding and the quantizers of bitnet and dqt (src/quant/).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "core/error.h"
#include "quant/activation_quant.h"
#include "quant/bf16.h"
#include "quant/codes.h"
#include "quant/dynamic8.h"
#include "quant/rounding.h"
#include "quant/ternary.h"
#include "test_helpers.h"

using namespace dqt;

namespace {

std::vector<CodeGrid> every_grid() {
    std::vector<CodeGrid> grids = {CodeGrid{1}};
    for (int bits = 2; bits <= 8; ++bits) grids.push_back(CodeGrid{bits});
    return grids;
}

}  // namespace

TEST(QuantCodes, GridsAndParsing) {
    EXPECT_EQ(parse_code_grid("1.58").qn(), -1);
    EXPECT_EQ(parse_code_grid("1.58").qp(), 1);
    EXPECT_EQ(parse_code_grid("2").qn(), -2);
    EXPECT_EQ(parse_code_grid("2").qp(), 1);
    EXPECT_EQ(parse_code_grid("8").qn(), -128);
    EXPECT_EQ(parse_code_grid("8").qp(), 127);
    EXPECT_EQ(code_bytes(CodeGrid{1}, 10), 3u);  // 2 bits per ternary code
    EXPECT_EQ(code_bytes(CodeGrid{4}, 10), 10u);
    for (const char* bad : {"1", "9", "0", "1.5", "", "four"}) EXPECT_THROW(parse_code_grid(bad), Error) << bad;
}

// Random codes written one by one read back unchanged, in every format and at ragged
// lengths; the fast dequantizer equals the one-code-at-a-time reference bit for bit.
TEST(QuantCodes, PackedCodesRoundTripAndDequantizeMatchesReference) {
    const uint64_t seed = dqt::testing::test_seed();
    SCOPED_TRACE(dqt::testing::seed_trace(seed));
    std::mt19937 rng(static_cast<uint32_t>(seed));
    for (const CodeGrid& grid : every_grid()) {
        for (size_t count : {1u, 3u, 4u, 5u, 257u, 1000u}) {
            std::uniform_int_distribution<int> pick(grid.qn(), grid.qp());
            std::vector<int> q(count);
            std::vector<uint8_t> codes(code_bytes(grid, count), 0xff);
            for (size_t i = 0; i < count; ++i) {
                q[i] = pick(rng);
                write_code(codes.data(), grid, i, q[i]);
            }
            for (size_t i = 0; i < count; ++i) ASSERT_EQ(read_code(codes.data(), grid, i), q[i]) << grid.label();
            const float scale = std::uniform_real_distribution<float>(0.5f, 80.0f)(rng);
            std::vector<float> fast(count), reference(count);
            dequantize_codes(fast.data(), codes.data(), count, grid, scale);
            dequantize_codes_reference(reference.data(), codes.data(), count, grid, scale);
            for (size_t i = 0; i < count; ++i) {
                ASSERT_EQ(fast[i], reference[i]) << grid.label() << " element " << i;
                ASSERT_EQ(reference[i], static_cast<float>(q[i]) / scale);
            }
            int top = grid.qn();
            for (int value : q) top = std::max(top, value);
            EXPECT_EQ(max_code(codes.data(), count, grid), top);
        }
    }
}

// quantize_nearest snaps to the nearest grid point and clips to [qn, qp].
TEST(QuantCodes, QuantizeNearestSnapsAndClips) {
    const CodeGrid grid{3};  // [-4, 3]
    const std::vector<float> w = {0.0f, 0.26f, -0.26f, 0.74f, 10.0f, -10.0f, 0.5f};
    std::vector<uint8_t> codes(code_bytes(grid, w.size()));
    quantize_nearest(codes.data(), w.data(), w.size(), grid, 2.0f);  // x = w * 2
    const std::vector<int> expected = {0, 1, -1, 1, 3, -4, 1};
    for (size_t i = 0; i < w.size(); ++i) EXPECT_EQ(read_code(codes.data(), grid, i), expected[i]) << i;
    EXPECT_FLOAT_EQ(absmean_code_scale(CodeGrid{1}, 0.02), 50.0f);
    EXPECT_FLOAT_EQ(absmean_code_scale(CodeGrid{8}, 0.02), 127.0f / 0.02f);
}

// E[stochastic_round(x, u)] = x: the mean of many roundings of one x lies within five
// standard errors (the rounding's std is at most 1/2) of x.
TEST(QuantRounding, StochasticRoundingIsUnbiased) {
    const uint64_t seed = dqt::testing::test_seed();
    SCOPED_TRACE("seed " + std::to_string(seed));
    const int draws = 40000;
    for (float x : {0.1f, -0.37f, 0.5f, 0.999f, -0.002f, 2.25f}) {
        double sum = 0.0;
        for (int i = 0; i < draws / 4; ++i) {
            for (float u : rounding_uniforms(seed, 1, 7, static_cast<uint64_t>(i))) {
                const float q = stochastic_round(x, u);
                ASSERT_TRUE(q == std::floor(x) || q == std::floor(x) + 1.0f);
                sum += q;
            }
        }
        EXPECT_NEAR(sum / draws, x, 5.0 * 0.5 / std::sqrt(draws)) << "x = " << x;
    }
}

TEST(QuantRounding, UniformsDependOnEveryKeyPart) {
    const auto base = rounding_uniforms(1, 2, 3, 4);
    EXPECT_NE(base, rounding_uniforms(9, 2, 3, 4));
    EXPECT_NE(base, rounding_uniforms(1, 9, 3, 4));
    EXPECT_NE(base, rounding_uniforms(1, 2, 9, 4));
    EXPECT_NE(base, rounding_uniforms(1, 2, 3, 9));
    EXPECT_EQ(base, rounding_uniforms(1, 2, 3, 4));
    for (float u : base) EXPECT_TRUE(u >= 0.0f && u < 1.0f);
}

// Per token: scale 127 / absmax, every value a multiple of 1/scale, error at most half a step.
TEST(QuantActivation, AbsmaxRowsMatchTheFormula) {
    const uint64_t seed = dqt::testing::test_seed();
    SCOPED_TRACE(dqt::testing::seed_trace(seed));
    std::mt19937 rng(static_cast<uint32_t>(seed));
    std::normal_distribution<float> normal(0.0f, 3.0f);
    const int rows = 5, cols = 77;
    std::vector<float> x(rows * cols);
    for (float& value : x) value = normal(rng);
    std::fill(x.begin() + 2 * cols, x.begin() + 3 * cols, 0.0f);  // an all-zero token stays zero
    std::vector<float> q = x;
    absmax_quantize_rows(q.data(), rows, cols);
    for (int r = 0; r < rows; ++r) {
        double absmax = 0.0;
        for (int j = 0; j < cols; ++j) absmax = std::max(absmax, std::fabs(double(x[r * cols + j])));
        const double scale = 127.0 / std::max(absmax, 1e-5);
        for (int j = 0; j < cols; ++j) {
            const double k = q[r * cols + j] * scale;
            EXPECT_NEAR(k, std::nearbyint(k), 1e-3) << "not on the grid";
            EXPECT_LE(std::fabs(q[r * cols + j] - x[r * cols + j]), 0.5 / scale + 1e-6);
            EXPECT_NEAR(k, std::nearbyint(x[r * cols + j] * scale), 1e-3);
        }
    }
}

TEST(QuantTernary, AbsmeanTernarizeMatchesTheFormula) {
    const uint64_t seed = dqt::testing::test_seed();
    SCOPED_TRACE(dqt::testing::seed_trace(seed));
    std::mt19937 rng(static_cast<uint32_t>(seed));
    std::normal_distribution<float> normal(0.0f, 0.02f);
    std::vector<float> w(1000), out(1000);
    for (float& value : w) value = normal(rng);
    double mean = 0.0;
    for (float value : w) mean += std::fabs(value);
    mean /= w.size();
    const float gamma = absmean_ternarize(out.data(), w.data(), w.size());
    EXPECT_NEAR(gamma, mean, 1e-7);
    int zeros = 0;
    for (size_t i = 0; i < w.size(); ++i) {
        const double ratio = w[i] / (gamma + kTernaryEps);
        const double expected = std::clamp(std::nearbyint(ratio), -1.0, 1.0) * gamma;
        EXPECT_FLOAT_EQ(out[i], static_cast<float>(expected)) << i;
        zeros += out[i] == 0.0f;
    }
    EXPECT_GT(zeros, 100);  // |w| < gamma / 2 occurs often for a normal tensor
}

TEST(QuantBf16, RoundsToNearestEven) {
    EXPECT_EQ(round_to_bf16(1.0f), 1.0f);
    EXPECT_EQ(round_to_bf16(1.0f + 1.0f / 256), 1.0f);  // exactly half: ties to even
    EXPECT_EQ(round_to_bf16(1.0f + 3.0f / 256), 1.0f + 4.0f / 256);
    EXPECT_EQ(round_to_bf16(-2.5f), -2.5f);
    EXPECT_TRUE(std::isnan(round_to_bf16(std::nanf(""))));
    const uint64_t seed = dqt::testing::test_seed();
    SCOPED_TRACE(dqt::testing::seed_trace(seed));
    std::mt19937 rng(static_cast<uint32_t>(seed));
    std::uniform_real_distribution<float> any(-100.0f, 100.0f);
    for (int i = 0; i < 1000; ++i) {
        const float x = any(rng);
        EXPECT_LE(std::fabs(round_to_bf16(x) - x), std::fabs(x) / 256.0f);
    }
}

TEST(QuantDynamic8, MapsAreSortedAndSpanTheUnitInterval) {
    for (const DynamicMap* map : {&dynamic_map_signed(), &dynamic_map_unsigned()}) {
        for (int i = 1; i < 256; ++i) ASSERT_LT(map->values[i - 1], map->values[i]);
        EXPECT_EQ(map->values[255], 1.0f);
        EXPECT_NE(std::find(map->values.begin(), map->values.end(), 0.0f), map->values.end());
    }
    EXPECT_EQ(dynamic_map_unsigned().values[0], 0.0f);
    EXPECT_LT(dynamic_map_signed().values[0], -0.99f);
    // Small magnitudes survive: 1e-5 of the block maximum is not flushed to zero but kept
    // within a factor of two (a linear 8-bit code would round it to 0).
    const auto& map = dynamic_map_signed();
    const float kept = map.values[nearest_code_reference(1.234e-5f, map)];
    EXPECT_GT(kept, 1.234e-5f / 2);
    EXPECT_LT(kept, 1.234e-5f * 2);
}

// quantize_block8 picks the nearest map entry of x / absmax (the linear-scan reference), so the
// error is at most half the largest gap between neighbouring entries: 0.0071 x absmax for the
// signed map, 0.0036 x absmax for the unsigned one.
TEST(QuantDynamic8, BlockQuantizationPicksTheNearestEntryWithinTheStatedBound) {
    const uint64_t seed = dqt::testing::test_seed();
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (const bool is_signed : {true, false}) {
        const DynamicMap& map = is_signed ? dynamic_map_signed() : dynamic_map_unsigned();
        const float bound = is_signed ? 0.0071f : 0.0036f;
        for (const float scale : {1e-8f, 1e-3f, 1.0f, 300.0f}) {
            const size_t n = 257;
            std::vector<float> x(n), back(n);
            for (size_t i = 0; i < n; ++i) {
                // Magnitudes over seven decades, as Adam's moments have.
                const float value = scale * std::pow(10.0f, -6.0f * std::uniform_real_distribution<float>(0, 1)(rng));
                x[i] = is_signed ? (normal(rng) < 0 ? -value : value) : value;
            }
            std::vector<uint8_t> codes(n);
            const float absmax = quantize_block8(codes.data(), x.data(), n, map);
            dequantize_block8(back.data(), codes.data(), n, absmax, map);
            float expected_absmax = 0.0f;
            for (float value : x) expected_absmax = std::max(expected_absmax, std::fabs(value));
            ASSERT_EQ(absmax, expected_absmax);
            for (size_t i = 0; i < n; ++i) {
                const float normalized = x[i] * (1.0f / absmax);
                const uint8_t reference = nearest_code_reference(normalized, map);
                // Equal codes, or a tie within float rounding of a threshold.
                if (codes[i] != reference) {
                    ASSERT_NEAR(std::fabs(map.values[codes[i]] - normalized), std::fabs(map.values[reference] - normalized),
                                1e-6f)
                        << i;
                }
                ASSERT_LE(std::fabs(back[i] - x[i]), bound * absmax) << i;
            }
        }
    }
    // An all-zero block stays zero.
    std::vector<float> zeros(10, 0.0f), back(10, 1.0f);
    std::vector<uint8_t> codes(10);
    const float absmax = quantize_block8(codes.data(), zeros.data(), 10, dynamic_map_signed());
    dequantize_block8(back.data(), codes.data(), 10, absmax, dynamic_map_signed());
    for (float value : back) EXPECT_EQ(value, 0.0f);
}
