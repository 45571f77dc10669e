#include <gtest/gtest.h>
#include <omp.h>

#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "core/error.h"
#include "kernels/gemm.h"
#include "kernels/linear.h"
#include "test_helpers.h"

using namespace dqt;

namespace {

using GemmFn = void (*)(bool, bool, int, int, int, float, const float*, int, const float*, int, float, float*, int);

constexpr float kNan = std::numeric_limits<float>::quiet_NaN();
constexpr float kSentinel = 12345.0f;  // in C's padding, which gemm must leave alone

// The inputs of a fixed seed (DQT_TEST_SEED picks another); it goes into SCOPED_TRACE.
unsigned fresh_seed() { return dqt::testing::test_seed(); }

std::vector<float> random_floats(size_t count, std::mt19937& rng) {
    std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
    std::vector<float> values(count);
    for (float& x : values) x = uniform(rng);
    return values;
}

// One product with its operands stored row-major, each row padded by `pad` elements: NaN in A and
// B (a read of the padding would poison the result) and kSentinel in C.
struct Problem {
    bool trans_a, trans_b;
    int M, N, K, lda, ldb, ldc;
    float alpha, beta;
    std::vector<float> a, b, c;

    Problem(bool trans_a_, bool trans_b_, int M_, int N_, int K_, int pad, float alpha_, float beta_,
            std::mt19937& rng)
        : trans_a(trans_a_), trans_b(trans_b_), M(M_), N(N_), K(K_), alpha(alpha_), beta(beta_) {
        lda = (trans_a ? M : K) + pad;
        ldb = (trans_b ? K : N) + pad;
        ldc = N + pad;
        a = padded(trans_a ? K : M, trans_a ? M : K, lda, kNan, rng);
        b = padded(trans_b ? N : K, trans_b ? K : N, ldb, kNan, rng);
        c = padded(M, N, ldc, kSentinel, rng);
    }

    static std::vector<float> padded(int rows, int cols, int ld, float fill, std::mt19937& rng) {
        const std::vector<float> values = random_floats(size_t(rows) * cols, rng);
        std::vector<float> stored(std::max<size_t>(1, size_t(rows) * ld), fill);
        for (int r = 0; r < rows; ++r)
            for (int col = 0; col < cols; ++col) stored[size_t(r) * ld + col] = values[size_t(r) * cols + col];
        return stored;
    }

    std::vector<float> run(GemmFn fn) const {
        std::vector<float> out = c;
        fn(trans_a, trans_b, M, N, K, alpha, a.data(), lda, b.data(), ldb, beta, out.data(), ldc);
        return out;
    }

    // Per element, |alpha| |op(A)| |op(B)| + |beta| |C|: scales the rounding error bound.
    std::vector<float> magnitude() const {
        Problem abs = *this;
        for (auto* values : {&abs.a, &abs.b, &abs.c})
            for (float& x : *values) x = std::fabs(x);
        abs.alpha = std::fabs(alpha);
        abs.beta = std::fabs(beta);
        return abs.run(gemm_reference);
    }
};

std::string describe(const Problem& p) {
    return std::string(p.trans_a ? "T" : "N") + (p.trans_b ? "T " : "N ") + std::to_string(p.M) + "x" +
           std::to_string(p.N) + "x" + std::to_string(p.K) + " lda=" + std::to_string(p.lda) +
           " alpha=" + std::to_string(p.alpha) + " beta=" + std::to_string(p.beta);
}

// gemm within the forward error bound of fp32 dot products of length K, gamma_{K+4} with
// u = 2^-24 (K products and sums, alpha, beta, the final add), doubled for margin; padding of C
// untouched.
void expect_matches_reference(const Problem& p) {
    SCOPED_TRACE(describe(p));
    const std::vector<float> got = p.run(gemm), want = p.run(gemm_reference), scale = p.magnitude();
    const double tolerance = 2.0 * (p.K + 4) * std::ldexp(1.0, -24);
    for (int i = 0; i < p.M; ++i) {
        for (int j = 0; j < p.ldc; ++j) {
            const size_t at = size_t(i) * p.ldc + j;
            if (j < p.N)
                ASSERT_LE(std::fabs(double(got[at]) - want[at]), tolerance * scale[at]) << "at " << i << "," << j;
            else
                ASSERT_EQ(got[at], kSentinel) << "padding of C written at " << i << "," << j;
        }
    }
}

bool same_bits(const std::vector<float>& x, const std::vector<float>& y) {
    return x.size() == y.size() && std::memcmp(x.data(), y.data(), x.size() * sizeof(float)) == 0;
}

// Restores the OpenMP thread count a test changed.
struct ThreadCountGuard {
    int saved = omp_get_max_threads();
    ~ThreadCountGuard() { omp_set_num_threads(saved); }
};

}  // namespace

TEST(Gemm, MatchesReferenceForAllTransposesRaggedSizesAndPadding) {
    const unsigned seed = fresh_seed();
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937 rng(seed);
    // Small ragged sizes run as one chunk; 130x70x300 splits rows, 70x300x100 columns, and
    // 520x100x160 reaches the full eight chunks.
    const int sizes[][3] = {{1, 1, 1}, {7, 13, 5}, {65, 33, 17}, {130, 70, 300}, {70, 300, 100}, {520, 100, 160}};
    const float scalars[][2] = {{1.0f, 0.0f}, {0.5f, 1.0f}, {-2.0f, 0.25f}};
    for (bool trans_a : {false, true})
        for (bool trans_b : {false, true})
            for (const auto& size : sizes)
                for (const auto& scalar : scalars)
                    for (int pad : {0, 3})
                        expect_matches_reference(
                            Problem(trans_a, trans_b, size[0], size[1], size[2], pad, scalar[0], scalar[1], rng));
}

TEST(Gemm, EmptyInnerDimensionScalesC) {
    const unsigned seed = fresh_seed();
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937 rng(seed);
    Problem p(false, true, 9, 11, 0, 2, 1.5f, 0.5f, rng);
    const std::vector<float> got = p.run(gemm);
    for (int i = 0; i < p.M; ++i)
        for (int j = 0; j < p.N; ++j) EXPECT_EQ(got[i * p.ldc + j], 0.5f * p.c[i * p.ldc + j]);
}

TEST(Gemm, BetaZeroDoesNotReadC) {
    const unsigned seed = fresh_seed();
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937 rng(seed);
    for (const auto& size : {std::array<int, 3>{7, 13, 5}, std::array<int, 3>{300, 256, 64}}) {
        Problem p(false, false, size[0], size[1], size[2], 0, 1.0f, 0.0f, rng);
        std::fill(p.c.begin(), p.c.end(), kNan);
        for (float x : p.run(gemm)) ASSERT_TRUE(std::isfinite(x));
    }
}

TEST(Gemm, RejectsInvalidSizes) {
    std::vector<float> buffer(64);
    float* x = buffer.data();
    EXPECT_THROW(gemm(false, false, 4, 4, 4, 1, x, 3, x, 4, 0, x, 4), Error);  // lda < K
    EXPECT_THROW(gemm(false, true, 4, 4, 4, 1, x, 4, x, 3, 0, x, 4), Error);   // ldb < K
    EXPECT_THROW(gemm(true, false, 4, 5, 4, 1, x, 4, x, 5, 0, x, 4), Error);   // ldc < N
    EXPECT_THROW(gemm(false, false, -1, 4, 4, 1, x, 4, x, 4, 0, x, 4), Error);
}

TEST(Gemm, BitIdenticalForAnyThreadCountAndInsideParallelRegions) {
    const unsigned seed = fresh_seed();
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937 rng(seed);
    ThreadCountGuard guard;
    // Training shapes of the reference model (linear forward, dIn, dW; one attention head with
    // rows strided by the model width), chunked ragged ones, and NT 128x1024x1024, where
    // dnnl_sgemm's own threading gives different bits on 1 and 2 threads.
    const std::vector<Problem> problems = {
        Problem(false, true, 128, 1024, 1024, 0, 1.0f, 0.0f, rng),
        Problem(false, true, 2048, 688, 256, 0, 1.0f, 0.0f, rng),
        Problem(false, false, 2048, 256, 688, 0, 1.0f, 1.0f, rng),
        Problem(true, false, 256, 688, 2048, 0, 1.0f, 1.0f, rng),
        Problem(false, true, 256, 256, 64, 192, 0.125f, 0.0f, rng),
        Problem(true, false, 520, 100, 160, 5, -1.0f, 0.5f, rng),
        Problem(false, false, 70, 300, 100, 1, 1.0f, 1.0f, rng),
    };
    for (const Problem& p : problems) {
        SCOPED_TRACE(describe(p));
        std::vector<std::vector<float>> results;
        for (int threads : {1, 2, 3}) {
            omp_set_num_threads(threads);
            results.push_back(p.run(gemm));
        }
        std::vector<float> inside = p.c;  // the last thread of a team does the product
#pragma omp parallel num_threads(2)
        if (omp_get_thread_num() == omp_get_num_threads() - 1)
            gemm(p.trans_a, p.trans_b, p.M, p.N, p.K, p.alpha, p.a.data(), p.lda, p.b.data(), p.ldb, p.beta,
                 inside.data(), p.ldc);
        results.push_back(inside);
        EXPECT_TRUE(same_bits(results[0], results[1])) << "1 vs 2 threads";
        EXPECT_TRUE(same_bits(results[0], results[2])) << "1 vs 3 threads";
        EXPECT_TRUE(same_bits(results[0], results[3])) << "1 thread vs inside a parallel region";
    }
}

TEST(Gemm, LinearForwardAndBackwardMatchReference) {
    const unsigned seed = fresh_seed();
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937 rng(seed);
    const int rows = 37, in_features = 29, out_features = 45;
    const std::vector<float> in = random_floats(rows * in_features, rng);
    const std::vector<float> weight = random_floats(out_features * in_features, rng);
    const std::vector<float> dout = random_floats(rows * out_features, rng);
    const std::vector<float> din0 = random_floats(rows * in_features, rng);
    const std::vector<float> dweight0 = random_floats(out_features * in_features, rng);

    // References straight from the definitions, in double.
    std::vector<double> out_ref(rows * out_features), din_ref(din0.begin(), din0.end()),
        dweight_ref(dweight0.begin(), dweight0.end());
    for (int r = 0; r < rows; ++r)
        for (int o = 0; o < out_features; ++o)
            for (int i = 0; i < in_features; ++i) {
                out_ref[r * out_features + o] += double(in[r * in_features + i]) * weight[o * in_features + i];
                din_ref[r * in_features + i] += double(dout[r * out_features + o]) * weight[o * in_features + i];
                dweight_ref[o * in_features + i] += double(dout[r * out_features + o]) * in[r * in_features + i];
            }

    std::vector<float> out(rows * out_features, kNan), din = din0, dweight = dweight0;
    linear_forward(out.data(), in.data(), weight.data(), rows, in_features, out_features);
    linear_backward_input(din.data(), dout.data(), out_features, weight.data(), rows, in_features, out_features);
    linear_backward_weight(dweight.data(), dout.data(), out_features, in.data(), rows, in_features, out_features);
    // Sums of at most 45 products of values in [-1, 1): 1e-5 is ~20x the worst rounding.
    for (size_t k = 0; k < out.size(); ++k) ASSERT_NEAR(out[k], out_ref[k], 1e-5) << k;
    for (size_t k = 0; k < din.size(); ++k) ASSERT_NEAR(din[k], din_ref[k], 1e-5) << k;
    for (size_t k = 0; k < dweight.size(); ++k) ASSERT_NEAR(dweight[k], dweight_ref[k], 1e-5) << k;

    // In two slices of output features (as the lm_head is read in slices): the same sums.
    const int split = 17;
    std::vector<float> din_sliced = din0, dweight_sliced = dweight0;
    for (const auto& [first, last] : {std::pair{0, split}, std::pair{split, out_features}}) {
        linear_backward_input(din_sliced.data(), dout.data() + first, out_features, weight.data() + first * in_features,
                              rows, in_features, last - first);
        linear_backward_weight(dweight_sliced.data() + first * in_features, dout.data() + first, out_features,
                               in.data(), rows, in_features, last - first);
    }
    for (size_t k = 0; k < din.size(); ++k) ASSERT_NEAR(din_sliced[k], din_ref[k], 1e-5) << k;
    for (size_t k = 0; k < dweight.size(); ++k) ASSERT_NEAR(dweight_sliced[k], dweight_ref[k], 1e-5) << k;
}

TEST(Gemm, PeakMeasurementIsPlausibleAndRestoresThreadCount) {
    ThreadCountGuard guard;
    omp_set_num_threads(2);
    const double gflops = measure_gemm_peak_gflops(1);
    EXPECT_GT(gflops, 1.0);
    EXPECT_LT(gflops, 1e5);
    EXPECT_EQ(omp_get_max_threads(), 2);
}
