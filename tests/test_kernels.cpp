// Non-GEMM kernels. Two kinds of check per op:
//  - the double-precision reference backward against central finite differences of the
//    reference forward, for the scalar loss L = sum(out * R) with a fixed random R;
//  - the fast float kernels against the reference on fresh random inputs (the seed is printed
//    on failure), on ragged shapes, with the tolerance stated at each check.
// Tolerances are relative to the largest magnitude in the expected tensor, so that entries
// near zero are not held to an impossible relative bound.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "core/error.h"
#include "kernels/attention.h"
#include "kernels/cross_entropy.h"
#include "kernels/embedding.h"
#include "kernels/float16_widen.h"
#include "kernels/half_gemv.h"
#include "kernels/reference.h"
#include "kernels/rmsnorm.h"
#include "kernels/rope.h"
#include "kernels/swiglu.h"
#include "kernels/vecmath.h"
#include "test_helpers.h"

using namespace dqt;
using dqt::testing::with_threads;

namespace {

using Doubles = std::vector<double>;
using Floats = std::vector<float>;

// Seeded randomness (DQT_TEST_SEED picks another seed); the seed goes into every failure message.
struct Random {
    uint32_t seed = dqt::testing::test_seed();
    std::mt19937 engine{seed};
    std::string trace() const { return dqt::testing::seed_trace(seed); }

    Doubles normal(size_t n, double stddev = 1.0) {
        std::normal_distribution<double> dist(0.0, stddev);
        Doubles x(n);
        for (double& v : x) v = dist(engine);
        return x;
    }
    std::vector<int32_t> ints(size_t n, int upper) {
        std::uniform_int_distribution<int32_t> dist(0, upper - 1);
        std::vector<int32_t> x(n);
        for (int32_t& v : x) v = dist(engine);
        return x;
    }
};

Floats to_float(const Doubles& x) { return Floats(x.begin(), x.end()); }
// The reference runs on exactly the values the float kernel saw.
Doubles to_double(const Floats& x) { return Doubles(x.begin(), x.end()); }

template <typename A, typename E>
void expect_close(const A& actual, const E& expected, double rtol, const std::string& what) {
    ASSERT_EQ(actual.size(), expected.size()) << what;
    double scale = 0;
    for (auto e : expected) scale = std::max(scale, std::abs(static_cast<double>(e)));
    size_t failures = 0;
    for (size_t i = 0; i < expected.size(); ++i) {
        const double a = actual[i], e = expected[i];
        if (!(std::abs(a - e) <= rtol * scale) && ++failures <= 5)
            ADD_FAILURE() << what << "[" << i << "]: got " << a << ", expected " << e << " (tolerance "
                          << rtol * scale << ")";
    }
    EXPECT_EQ(failures, 0u) << what << ": mismatches out of " << expected.size();
}

double dot(const Doubles& a, const Doubles& b) {
    double s = 0;
    for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
    return s;
}

// Central differences of loss() with respect to every element of x (perturbed in place).
Doubles numeric_gradient(Doubles& x, const std::function<double()>& loss, double eps = 1e-6) {
    Doubles grad(x.size());
    for (size_t i = 0; i < x.size(); ++i) {
        const double saved = x[i];
        x[i] = saved + eps;
        const double plus = loss();
        x[i] = saved - eps;
        const double minus = loss();
        x[i] = saved;
        grad[i] = (plus - minus) / (2 * eps);
    }
    return grad;
}

constexpr double kFiniteDifferenceTol = 1e-6;

}  // namespace

// ---------------------------------------------------------------------------------------------
// RMSNorm

TEST(KernelRmsnorm, ReferenceBackwardMatchesFiniteDifferences) {
    Random rng;
    SCOPED_TRACE(rng.trace());
    const int rows = 3, cols = 7;
    Doubles x = rng.normal(rows * cols), gain = rng.normal(cols);
    const Doubles R = rng.normal(rows * cols);
    Doubles y(rows * cols), rstd(rows);
    auto loss = [&] {
        ref::rmsnorm_forward(y.data(), rstd.data(), x.data(), gain.data(), rows, cols, 1e-5);
        return dot(y, R);
    };
    loss();
    Doubles dx(rows * cols), dgain(cols);
    ref::rmsnorm_backward(dx.data(), dgain.data(), R.data(), x.data(), gain.data(), rstd.data(), rows, cols);
    expect_close(dx, numeric_gradient(x, loss), kFiniteDifferenceTol, "dx");
    expect_close(dgain, numeric_gradient(gain, loss), kFiniteDifferenceTol, "dgain");
}

TEST(KernelRmsnorm, FastMatchesReference) {
    Random rng;
    SCOPED_TRACE(rng.trace());
    for (const auto& [rows, cols] : {std::pair{5, 37}, std::pair{64, 256}, std::pair{1, 3}}) {
        SCOPED_TRACE("rows " + std::to_string(rows) + " cols " + std::to_string(cols));
        const size_t n = static_cast<size_t>(rows) * cols;
        const Floats x = to_float(rng.normal(n)), gain = to_float(rng.normal(cols)), dy = to_float(rng.normal(n));
        // Gradient buffers start non-zero: backward must accumulate.
        Floats dx = to_float(rng.normal(n)), dgain = to_float(rng.normal(cols));
        Doubles ref_dx = to_double(dx), ref_dgain = to_double(dgain);

        Floats y(n), rstd(rows), y_serial(n), rstd_serial(rows);
        rmsnorm_forward(y.data(), rstd.data(), x.data(), gain.data(), rows, cols, 1e-5f);
        rmsnorm_forward_serial(y_serial.data(), rstd_serial.data(), x.data(), gain.data(), rows, cols, 1e-5f);
        EXPECT_EQ(y_serial, y) << "the one-thread variant differs";
        EXPECT_EQ(rstd_serial, rstd);
        rmsnorm_backward(dx.data(), dgain.data(), dy.data(), x.data(), gain.data(), rstd.data(), rows, cols);

        const Doubles xd = to_double(x), gd = to_double(gain), dyd = to_double(dy);
        Doubles ref_y(n), ref_rstd(rows);
        ref::rmsnorm_forward(ref_y.data(), ref_rstd.data(), xd.data(), gd.data(), rows, cols, 1e-5);
        ref::rmsnorm_backward(ref_dx.data(), ref_dgain.data(), dyd.data(), xd.data(), gd.data(), ref_rstd.data(),
                              rows, cols);
        expect_close(y, ref_y, 1e-6, "y");
        expect_close(rstd, ref_rstd, 1e-6, "rstd");
        expect_close(dx, ref_dx, 1e-5, "dx");
        expect_close(dgain, ref_dgain, 1e-5, "dgain");
    }
}

// ---------------------------------------------------------------------------------------------
// RoPE

TEST(KernelRope, AdjacentPairConvention) {
    // head_dim 4 at position 1: pair 0 turns by 1 rad, pair 1 by theta^(-2/4) = 0.01 rad.
    Floats x = {1, 0, 0, 1};
    rope_forward(x.data(), 1, 1, 1, 4, 1, 10000.0f);
    EXPECT_NEAR(x[0], std::cos(1.0), 1e-6);
    EXPECT_NEAR(x[1], std::sin(1.0), 1e-6);
    EXPECT_NEAR(x[2], -std::sin(0.01), 1e-6);
    EXPECT_NEAR(x[3], std::cos(0.01), 1e-6);
}

TEST(KernelRope, ReferenceBackwardMatchesFiniteDifferences) {
    Random rng;
    SCOPED_TRACE(rng.trace());
    const int batch = 2, seq = 3, heads = 2, head_dim = 6, pos0 = 4;
    const size_t n = static_cast<size_t>(batch) * seq * heads * head_dim;
    Doubles x = rng.normal(n);
    const Doubles R = rng.normal(n);
    auto loss = [&] {
        Doubles y = x;
        ref::rope_forward(y.data(), batch, seq, heads, head_dim, pos0, 10000.0);
        return dot(y, R);
    };
    Doubles dx = R;
    ref::rope_backward(dx.data(), batch, seq, heads, head_dim, pos0, 10000.0);
    expect_close(dx, numeric_gradient(x, loss), kFiniteDifferenceTol, "dx");
}

TEST(KernelRope, FastMatchesReference) {
    Random rng;
    SCOPED_TRACE(rng.trace());
    const int batch = 2, seq = 7, heads = 3, head_dim = 10, pos0 = 5;
    const size_t n = static_cast<size_t>(batch) * seq * heads * head_dim;
    Floats x = to_float(rng.normal(n)), dx = to_float(rng.normal(n));
    Doubles ref_x = to_double(x), ref_dx = to_double(dx);
    rope_forward(x.data(), batch, seq, heads, head_dim, pos0, 10000.0f);
    rope_backward(dx.data(), batch, seq, heads, head_dim, pos0, 10000.0f);
    ref::rope_forward(ref_x.data(), batch, seq, heads, head_dim, pos0, 10000.0);
    ref::rope_backward(ref_dx.data(), batch, seq, heads, head_dim, pos0, 10000.0);
    expect_close(x, ref_x, 1e-6, "x");
    expect_close(dx, ref_dx, 1e-6, "dx");
}

// Inference rotates a share of heads at a time, from one table for its whole context, with rows
// wider than the rotated heads: the same bits as the training forward's rope at those positions.
TEST(KernelRope, HeadSharesFromATableEqualTheTrainingRope) {
    Random rng;
    SCOPED_TRACE(rng.trace());
    const int seq = 5, heads = 4, head_dim = 8, pos0 = 3, row_stride = heads * head_dim + 7;
    const Floats x = to_float(rng.normal(static_cast<size_t>(seq) * row_stride));
    Floats expected(static_cast<size_t>(seq) * heads * head_dim);
    for (int t = 0; t < seq; ++t)
        std::copy_n(x.begin() + t * row_stride, heads * head_dim, expected.begin() + t * heads * head_dim);
    rope_forward(expected.data(), 1, seq, heads, head_dim, pos0, 10000.0f);
    const RopeTable table(pos0 + seq + 2, head_dim, 0, 10000.0f);
    Floats shares = x;
    rope_forward_heads(shares.data(), seq, row_stride, 0, 1, table, pos0);
    rope_forward_heads(shares.data(), seq, row_stride, 1, heads, table, pos0);
    for (int t = 0; t < seq; ++t) {
        const Floats row(shares.begin() + t * row_stride, shares.begin() + t * row_stride + heads * head_dim);
        EXPECT_EQ(row, Floats(expected.begin() + t * heads * head_dim, expected.begin() + (t + 1) * heads * head_dim));
        // The padding past the heads is not touched.
        EXPECT_EQ(shares[t * row_stride + heads * head_dim], x[t * row_stride + heads * head_dim]);
    }
    EXPECT_THROW(rope_forward_heads(shares.data(), seq, row_stride, 0, heads, table, pos0 + 3), Error);
}

TEST(KernelRope, OddHeadDimIsAnError) {
    Floats x(3);
    EXPECT_THROW(rope_forward(x.data(), 1, 1, 1, 3, 0, 10000.0f), Error);
}

// ---------------------------------------------------------------------------------------------
// Attention

namespace {

struct AttentionShape {
    int batch, seq, heads, kv_heads, head_dim;
    size_t q_size() const { return static_cast<size_t>(batch) * seq * heads * head_dim; }
    size_t kv_size() const { return static_cast<size_t>(batch) * seq * kv_heads * head_dim; }
    size_t probs_size() const { return static_cast<size_t>(batch) * heads * seq * seq; }
    std::string name() const {
        return "batch " + std::to_string(batch) + " seq " + std::to_string(seq) + " heads " + std::to_string(heads) +
               " kv_heads " + std::to_string(kv_heads) + " head_dim " + std::to_string(head_dim);
    }
};

// The shapes decode is checked on: head dims below, at and above the tile width, grouped and
// not (a kv head's 6 query heads decode as 4 + 2 with AVX-512); the fourth spans three key
// tiles and more value columns than decode's chains cover at once.
const AttentionShape kDecodeShapes[] = {AttentionShape{1, 9, 4, 2, 10}, AttentionShape{1, 37, 2, 1, 16},
                                        AttentionShape{1, 17, 3, 3, 40}, AttentionShape{1, 140, 2, 1, 72},
                                        AttentionShape{1, 70, 12, 2, 24}};

// Random queries, keys and values of one shape, drawn in that order.
struct QueryKeyValues {
    Floats q, k, v;
};
QueryKeyValues random_qkv(Random& rng, const AttentionShape& s) {
    return {to_float(rng.normal(s.q_size())), to_float(rng.normal(s.kv_size())), to_float(rng.normal(s.kv_size()))};
}

struct AttentionResult {
    Floats out, probs, dq, dk, dv;
};

// Forward then backward of the fast kernels; gradients start from the given values.
AttentionResult run_attention(const AttentionShape& s, const Floats& q, const Floats& k, const Floats& v,
                              const Floats& dout, AttentionResult grads) {
    AttentionResult r = std::move(grads);
    r.out.assign(s.q_size(), 0.0f);
    r.probs.assign(s.probs_size(), 0.0f);
    attention_forward(r.out.data(), r.probs.data(), q.data(), k.data(), v.data(), s.batch, s.seq, s.heads,
                      s.kv_heads, s.head_dim);
    Floats scratch(attention_backward_scratch_floats(s.batch, s.seq, s.heads));
    attention_backward(r.dq.data(), r.dk.data(), r.dv.data(), scratch.data(), dout.data(), q.data(), k.data(),
                       v.data(), r.probs.data(), s.batch, s.seq, s.heads, s.kv_heads, s.head_dim);
    return r;
}

}  // namespace

TEST(KernelAttention, ReferenceBackwardMatchesFiniteDifferences) {
    Random rng;
    SCOPED_TRACE(rng.trace());
    const AttentionShape s{2, 5, 4, 2, 6};  // grouped-query: two query heads per kv head
    Doubles q = rng.normal(s.q_size()), k = rng.normal(s.kv_size()), v = rng.normal(s.kv_size());
    const Doubles R = rng.normal(s.q_size());
    Doubles out(s.q_size()), probs(s.probs_size());
    auto loss = [&] {
        ref::attention_forward(out.data(), probs.data(), q.data(), k.data(), v.data(), s.batch, s.seq, s.heads,
                               s.kv_heads, s.head_dim);
        return dot(out, R);
    };
    loss();
    Doubles dq(s.q_size()), dk(s.kv_size()), dv(s.kv_size());
    ref::attention_backward(dq.data(), dk.data(), dv.data(), R.data(), q.data(), k.data(), v.data(), probs.data(),
                            s.batch, s.seq, s.heads, s.kv_heads, s.head_dim);
    expect_close(dq, numeric_gradient(q, loss), kFiniteDifferenceTol, "dq");
    expect_close(dk, numeric_gradient(k, loss), kFiniteDifferenceTol, "dk");
    expect_close(dv, numeric_gradient(v, loss), kFiniteDifferenceTol, "dv");
}

TEST(KernelAttention, FastMatchesReference) {
    Random rng;
    SCOPED_TRACE(rng.trace());
    const AttentionShape shapes[] = {{2, 7, 4, 2, 6}, {1, 37, 2, 1, 10}, {2, 20, 3, 3, 64}, {1, 33, 4, 4, 16},
                                     {1, 1, 2, 1, 8}};
    for (const AttentionShape& s : shapes) {
        SCOPED_TRACE(s.name());
        const Floats q = to_float(rng.normal(s.q_size())), k = to_float(rng.normal(s.kv_size())),
                     v = to_float(rng.normal(s.kv_size())), dout = to_float(rng.normal(s.q_size()));
        AttentionResult start;
        start.dq = to_float(rng.normal(s.q_size()));
        start.dk = to_float(rng.normal(s.kv_size()));
        start.dv = to_float(rng.normal(s.kv_size()));
        const AttentionResult fast = run_attention(s, q, k, v, dout, start);

        const Doubles qd = to_double(q), kd = to_double(k), vd = to_double(v), doutd = to_double(dout);
        Doubles out(s.q_size()), probs(s.probs_size());
        Doubles dq = to_double(start.dq), dk = to_double(start.dk), dv = to_double(start.dv);
        ref::attention_forward(out.data(), probs.data(), qd.data(), kd.data(), vd.data(), s.batch, s.seq, s.heads,
                               s.kv_heads, s.head_dim);
        ref::attention_backward(dq.data(), dk.data(), dv.data(), doutd.data(), qd.data(), kd.data(), vd.data(),
                                probs.data(), s.batch, s.seq, s.heads, s.kv_heads, s.head_dim);
        // Float sums of up to seq * head_dim products: a few 1e-7 relative in practice.
        expect_close(fast.out, out, 1e-5, "out");
        expect_close(fast.probs, probs, 1e-5, "probs");
        expect_close(fast.dq, dq, 1e-5, "dq");
        expect_close(fast.dk, dk, 1e-5, "dk");
        expect_close(fast.dv, dv, 1e-5, "dv");
    }
}

TEST(KernelAttention, BitIdenticalForOneAndTwoThreads) {
    Random rng;
    SCOPED_TRACE(rng.trace());
    const AttentionShape s{3, 33, 4, 2, 16};
    const Floats q = to_float(rng.normal(s.q_size())), k = to_float(rng.normal(s.kv_size())),
                 v = to_float(rng.normal(s.kv_size())), dout = to_float(rng.normal(s.q_size()));
    AttentionResult start;
    start.dq = to_float(rng.normal(s.q_size()));
    start.dk = to_float(rng.normal(s.kv_size()));
    start.dv = to_float(rng.normal(s.kv_size()));
    AttentionResult one, two;
    with_threads(1, [&] { one = run_attention(s, q, k, v, dout, start); });
    with_threads(2, [&] { two = run_attention(s, q, k, v, dout, start); });
    EXPECT_EQ(one.out, two.out);
    EXPECT_EQ(one.probs, two.probs);
    EXPECT_EQ(one.dq, two.dq);
    EXPECT_EQ(one.dk, two.dk);
    EXPECT_EQ(one.dv, two.dv);
}

// Decode reads a cache (keys transposed, values as rows) and must give row pos of the causal
// forward bit for bit: the same multiply-add chains (inference's prompts attend through it too).
TEST(KernelAttention, DecodeEqualsRowOfForwardBitForBit) {
    for (const AttentionShape& s : kDecodeShapes) {
        Random rng;
        SCOPED_TRACE(rng.trace() + " head_dim " + std::to_string(s.head_dim));
        const auto [q, k, v] = random_qkv(rng, s);
        Floats out(s.q_size()), probs(s.probs_size());
        attention_forward(out.data(), probs.data(), q.data(), k.data(), v.data(), 1, s.seq, s.heads, s.kv_heads,
                          s.head_dim);
        const int key_stride = attention_key_stride(s.seq), value_stride = attention_value_stride(s.seq, s.head_dim);
        Floats keys(static_cast<size_t>(key_stride) * s.kv_heads * s.head_dim, 0.0f);
        Floats values(static_cast<size_t>(value_stride) * s.kv_heads * s.head_dim, 0.0f);
        // Stored and decoded in two shares of heads, as inference's threads do.
        const int kv_split = s.kv_heads / 2, split = kv_split * (s.heads / s.kv_heads);
        store_keys_and_values(keys.data(), key_stride, values.data(), value_stride, k.data(), v.data(), 0, s.seq,
                              s.kv_heads, s.head_dim, 0, kv_split);
        store_keys_and_values(keys.data(), key_stride, values.data(), value_stride, k.data(), v.data(), 0, s.seq,
                              s.kv_heads, s.head_dim, kv_split, s.kv_heads);
        // Row pos of a causal forward only sees rows 0..pos, exactly what decode at pos sees.
        const size_t row = static_cast<size_t>(s.heads) * s.head_dim;
        for (int pos = 0; pos < s.seq; ++pos) {
            SCOPED_TRACE("pos " + std::to_string(pos));
            Floats decoded(row);
            for (const auto& [first, last] : {std::pair(0, split), std::pair(split, s.heads)})
                attention_decode(decoded.data(), q.data() + pos * row, keys.data(), key_stride, values.data(),
                                 value_stride, pos, s.heads, s.kv_heads, s.head_dim, first, last);
            const Floats expected(out.begin() + pos * row, out.begin() + (pos + 1) * row);
            ASSERT_EQ(decoded, expected);
        }
    }
}

// An fp16 cache (read in place on AVX-512 machines, widened first elsewhere) decodes to the
// bits of the forward over the fp16-rounded keys and values.
TEST(KernelAttention, DecodeFromAnFp16CacheEqualsTheForwardOverRoundedKeysAndValues) {
    for (const AttentionShape& s : kDecodeShapes) {
        Random rng;
        SCOPED_TRACE(rng.trace() + " head_dim " + std::to_string(s.head_dim));
        auto [q, k, v] = random_qkv(rng, s);
        const int key_stride = attention_key_stride(s.seq), value_stride = attention_value_stride(s.seq, s.head_dim);
        std::vector<Float16> keys(static_cast<size_t>(key_stride) * s.kv_heads * s.head_dim);
        std::vector<Float16> values(static_cast<size_t>(value_stride) * s.kv_heads * s.head_dim);
        store_keys_and_values(keys.data(), key_stride, values.data(), value_stride, k.data(), v.data(), 0, s.seq,
                              s.kv_heads, s.head_dim, 0, s.kv_heads);
        for (Floats* x : {&k, &v})  // what the cache holds of them (round to nearest even)
            for (float& value : *x) value = static_cast<float>(static_cast<Float16>(value));
        Floats out(s.q_size());
        attention_forward(out.data(), nullptr, q.data(), k.data(), v.data(), 1, s.seq, s.heads, s.kv_heads,
                          s.head_dim);
        const size_t row = static_cast<size_t>(s.heads) * s.head_dim;
        for (int pos = 0; pos < s.seq; ++pos) {
            SCOPED_TRACE("pos " + std::to_string(pos));
            Floats decoded(row);
            attention_decode(decoded.data(), q.data() + pos * row, keys.data(), key_stride, values.data(), value_stride,
                             pos, s.heads, s.kv_heads, s.head_dim, 0, s.heads);
            ASSERT_EQ(decoded, Floats(out.begin() + pos * row, out.begin() + (pos + 1) * row));
        }
    }
}

// The arrays of an int8 cache of shape s (attention.h's layout) and the Int8Codes over them.
struct Int8Cache {
    int key_stride, value_stride;
    std::vector<int8_t> key_codes, value_codes;
    Floats key_scales, value_scales;
    explicit Int8Cache(const AttentionShape& s)
        : key_stride(attention_key_stride(s.seq)),
          value_stride(attention_value_stride(s.seq, s.head_dim)),
          key_codes(static_cast<size_t>(key_stride) * s.kv_heads * s.head_dim),
          value_codes(static_cast<size_t>(value_stride) * s.kv_heads * s.head_dim),
          key_scales(static_cast<size_t>(key_stride) * s.kv_heads),
          value_scales(static_cast<size_t>(value_stride) * s.kv_heads) {}
    Int8Codes keys() { return {key_codes.data(), key_scales.data()}; }
    Int8Codes values() { return {value_codes.data(), value_scales.data()}; }
};

// An int8 cache (int8 codes, a scale per head and position) holds each entry within half a
// scale step of its value, and decodes to the forward over the entries it holds, to float
// rounding: decode scales each key's dot product and each value's probability by the scales
// instead of multiplying every entry out. Stored and decoded in two shares of heads.
TEST(KernelAttention, DecodeFromAnInt8CacheEqualsTheForwardOverItsEntries) {
    for (const AttentionShape& s : kDecodeShapes) {
        Random rng;
        SCOPED_TRACE(rng.trace() + " head_dim " + std::to_string(s.head_dim));
        auto [q, k, v] = random_qkv(rng, s);
        Int8Cache cache(s);
        const int key_stride = cache.key_stride, value_stride = cache.value_stride;
        const Int8Codes keys = cache.keys(), values = cache.values();
        const int kv_split = s.kv_heads / 2, split = kv_split * (s.heads / s.kv_heads);
        store_keys_and_values(keys, key_stride, values, value_stride, k.data(), v.data(), 0, s.seq, s.kv_heads,
                              s.head_dim, 0, kv_split);
        store_keys_and_values(keys, key_stride, values, value_stride, k.data(), v.data(), 0, s.seq, s.kv_heads,
                              s.head_dim, kv_split, s.kv_heads);
        // Replace k and v by what the cache holds, read back through the layout of attention.h.
        for (int pos = 0; pos < s.seq; ++pos)
            for (int h = 0; h < s.kv_heads; ++h) {
                const size_t at = (static_cast<size_t>(pos) * s.kv_heads + h) * s.head_dim;
                const float key_scale = cache.key_scales[static_cast<size_t>(h) * key_stride + pos];
                const float value_scale = cache.value_scales[static_cast<size_t>(h) * value_stride + pos];
                float key_max = 0.0f, value_max = 0.0f;
                for (int d = 0; d < s.head_dim; ++d) {
                    key_max = std::max(key_max, std::fabs(k[at + d]));
                    value_max = std::max(value_max, std::fabs(v[at + d]));
                }
                ASSERT_NEAR(key_scale, key_max / 127, 1e-6f * key_max);
                ASSERT_NEAR(value_scale, value_max / 127, 1e-6f * value_max);
                for (int d = 0; d < s.head_dim; ++d) {
                    const size_t key_index = static_cast<size_t>(h) * s.head_dim * key_stride +
                                             (static_cast<size_t>(pos / kAttentionKeyTile) * s.head_dim + d) *
                                                 kAttentionKeyTile +
                                             pos % kAttentionKeyTile;
                    const float key = cache.key_codes[key_index] * key_scale;
                    const float value =
                        cache.value_codes[(static_cast<size_t>(h) * value_stride + pos) * s.head_dim + d] * value_scale;
                    ASSERT_LE(std::fabs(key - k[at + d]), 0.5001f * key_scale);
                    ASSERT_LE(std::fabs(value - v[at + d]), 0.5001f * value_scale);
                    k[at + d] = key;
                    v[at + d] = value;
                }
            }
        Floats out(s.q_size());
        attention_forward(out.data(), nullptr, q.data(), k.data(), v.data(), 1, s.seq, s.heads, s.kv_heads,
                          s.head_dim);
        const size_t row = static_cast<size_t>(s.heads) * s.head_dim;
        for (int pos = 0; pos < s.seq; ++pos) {
            SCOPED_TRACE("pos " + std::to_string(pos));
            Floats decoded(row);
            for (const auto& [first, last] : {std::pair(0, split), std::pair(split, s.heads)})
                attention_decode(decoded.data(), q.data() + pos * row, keys, key_stride, values, value_stride, pos,
                                 s.heads, s.kv_heads, s.head_dim, first, last);
            for (size_t i = 0; i < row; ++i) ASSERT_NEAR(decoded[i], out[pos * row + i], 1e-5f) << "element " << i;
        }
    }
}

// A prompt's chunk after its start decodes its rows together (four at a time with AVX-512,
// each key and value loaded once for them): every row must get its own decode's bits, from an
// fp32, an fp16 and an int8 cache, for chunks that start anywhere and end in a partial block of
// rows.
TEST(KernelAttention, DecodeOfAChunkOfRowsEqualsDecodeRowByRow) {
    for (const AttentionShape& s : kDecodeShapes) {
        Random rng;
        SCOPED_TRACE(rng.trace() + " head_dim " + std::to_string(s.head_dim));
        const auto [q, k, v] = random_qkv(rng, s);
        const int key_stride = attention_key_stride(s.seq), value_stride = attention_value_stride(s.seq, s.head_dim);
        Floats keys(static_cast<size_t>(key_stride) * s.kv_heads * s.head_dim, 0.0f);
        Floats values(static_cast<size_t>(value_stride) * s.kv_heads * s.head_dim, 0.0f);
        std::vector<Float16> keys16(keys.size()), values16(values.size());
        store_keys_and_values(keys.data(), key_stride, values.data(), value_stride, k.data(), v.data(), 0, s.seq,
                              s.kv_heads, s.head_dim, 0, s.kv_heads);
        store_keys_and_values(keys16.data(), key_stride, values16.data(), value_stride, k.data(), v.data(), 0, s.seq,
                              s.kv_heads, s.head_dim, 0, s.kv_heads);
        Int8Cache cache8(s);
        const Int8Codes keys8 = cache8.keys(), values8 = cache8.values();
        store_keys_and_values(keys8, key_stride, values8, value_stride, k.data(), v.data(), 0, s.seq, s.kv_heads,
                              s.head_dim, 0, s.kv_heads);
        const int row = s.heads * s.head_dim;
        const int split = s.heads / s.kv_heads * (s.kv_heads / 2);  // two shares of heads, as two threads
        for (int first = 0; first < s.seq; first += 1 + first / 2) {
            const int rows = std::min(s.seq - first, 1 + (first * 7 + 3) % 11);
            SCOPED_TRACE("rows " + std::to_string(first) + " + " + std::to_string(rows));
            Floats by_row(static_cast<size_t>(rows) * row), by_row16(by_row.size()), by_row8(by_row.size());
            for (int i = 0; i < rows; ++i) {
                const float* qi = q.data() + static_cast<size_t>(first + i) * row;
                attention_decode(by_row.data() + static_cast<size_t>(i) * row, qi, keys.data(), key_stride,
                                 values.data(), value_stride, first + i, s.heads, s.kv_heads, s.head_dim, 0, s.heads);
                attention_decode(by_row16.data() + static_cast<size_t>(i) * row, qi, keys16.data(), key_stride,
                                 values16.data(), value_stride, first + i, s.heads, s.kv_heads, s.head_dim, 0, s.heads);
                attention_decode(by_row8.data() + static_cast<size_t>(i) * row, qi, keys8, key_stride, values8,
                                 value_stride, first + i, s.heads, s.kv_heads, s.head_dim, 0, s.heads);
            }
            Floats together(by_row.size()), together16(by_row.size()), together8(by_row.size());
            const float* q_first = q.data() + static_cast<size_t>(first) * row;
            for (const auto& [begin, end] : {std::pair(0, split), std::pair(split, s.heads)}) {
                attention_decode_rows(together.data(), q_first, row, keys.data(), key_stride, values.data(), value_stride,
                                      first, rows, s.heads, s.kv_heads, s.head_dim, begin, end);
                attention_decode_rows(together16.data(), q_first, row, keys16.data(), key_stride, values16.data(),
                                      value_stride, first, rows, s.heads, s.kv_heads, s.head_dim, begin, end);
                attention_decode_rows(together8.data(), q_first, row, keys8, key_stride, values8, value_stride, first,
                                      rows, s.heads, s.kv_heads, s.head_dim, begin, end);
            }
            ASSERT_EQ(together, by_row);
            ASSERT_EQ(together16, by_row16);
            ASSERT_EQ(together8, by_row8);
        }
    }
}

TEST(KernelAttention, HeadsNotMultipleOfKvHeadsIsAnError) {
    Floats x(64);
    EXPECT_THROW(attention_forward(x.data(), x.data(), x.data(), x.data(), x.data(), 1, 1, 3, 2, 4), Error);
}

// ---------------------------------------------------------------------------------------------
// SwiGLU

TEST(KernelSwiglu, ReferenceBackwardMatchesFiniteDifferences) {
    Random rng;
    SCOPED_TRACE(rng.trace());
    const int n = 23;
    Doubles gate = rng.normal(n, 3.0), up = rng.normal(n);
    const Doubles R = rng.normal(n);
    auto loss = [&] {
        Doubles h(n);
        ref::swiglu_forward(h.data(), gate.data(), up.data(), n);
        return dot(h, R);
    };
    Doubles dgate(n), dup(n);
    ref::swiglu_backward(dgate.data(), dup.data(), R.data(), gate.data(), up.data(), n);
    expect_close(dgate, numeric_gradient(gate, loss), kFiniteDifferenceTol, "dgate");
    expect_close(dup, numeric_gradient(up, loss), kFiniteDifferenceTol, "dup");
}

TEST(KernelSwiglu, FastMatchesReference) {
    Random rng;
    SCOPED_TRACE(rng.trace());
    const int n = 1037;
    Doubles gate_d = rng.normal(n, 4.0);
    gate_d[0] = -200;  // saturated sigmoid in both directions
    gate_d[1] = 200;
    const Floats gate = to_float(gate_d), up = to_float(rng.normal(n)), dh = to_float(rng.normal(n));
    Floats h(n), dgate = to_float(rng.normal(n)), dup = to_float(rng.normal(n));
    Doubles ref_h(n), ref_dgate = to_double(dgate), ref_dup = to_double(dup);
    swiglu_forward(h.data(), gate.data(), up.data(), n);
    Floats h_serial(n);
    swiglu_forward_serial(h_serial.data(), gate.data(), up.data(), n);
    EXPECT_EQ(h_serial, h) << "the one-thread variant differs";
    swiglu_backward(dgate.data(), dup.data(), dh.data(), gate.data(), up.data(), n);
    const Doubles gd = to_double(gate), ud = to_double(up), dhd = to_double(dh);
    ref::swiglu_forward(ref_h.data(), gd.data(), ud.data(), n);
    ref::swiglu_backward(ref_dgate.data(), ref_dup.data(), dhd.data(), gd.data(), ud.data(), n);
    expect_close(h, ref_h, 1e-6, "h");
    expect_close(dgate, ref_dgate, 1e-6, "dgate");
    expect_close(dup, ref_dup, 1e-6, "dup");
}

TEST(KernelRelu2Glu, ReferenceBackwardMatchesFiniteDifferences) {
    Random rng;
    SCOPED_TRACE(rng.trace());
    const int n = 23;
    Doubles gate = rng.normal(n, 3.0), up = rng.normal(n);
    for (double& g : gate) g += g > 0 ? 0.1 : -0.1;  // away from the kink at 0, where the difference is one-sided
    const Doubles R = rng.normal(n);
    auto loss = [&] {
        Doubles h(n);
        ref::relu2_glu_forward(h.data(), gate.data(), up.data(), n);
        return dot(h, R);
    };
    Doubles dgate(n), dup(n);
    ref::relu2_glu_backward(dgate.data(), dup.data(), R.data(), gate.data(), up.data(), n);
    expect_close(dgate, numeric_gradient(gate, loss), kFiniteDifferenceTol, "dgate");
    expect_close(dup, numeric_gradient(up, loss), kFiniteDifferenceTol, "dup");
}

TEST(KernelRelu2Glu, FastMatchesReferenceAndTheDispatchPicksIt) {
    Random rng;
    SCOPED_TRACE(rng.trace());
    const int n = 9000;  // more than one chunk: the threaded path runs
    const Floats gate = to_float(rng.normal(n, 2.0)), up = to_float(rng.normal(n)), dh = to_float(rng.normal(n));
    Floats h(n), h_serial(n), h_dispatched(n), dgate = to_float(rng.normal(n)), dup = to_float(rng.normal(n));
    Doubles ref_h(n), ref_dgate = to_double(dgate), ref_dup = to_double(dup);
    relu2_glu_forward(h.data(), gate.data(), up.data(), n);
    relu2_glu_forward_serial(h_serial.data(), gate.data(), up.data(), n);
    EXPECT_EQ(h_serial, h) << "the one-thread variant differs";
    gated_forward(GatedActivation::relu2, h_dispatched.data(), gate.data(), up.data(), n);
    EXPECT_EQ(h_dispatched, h);
    gated_backward(GatedActivation::relu2, dgate.data(), dup.data(), dh.data(), gate.data(), up.data(), n);
    const Doubles gd = to_double(gate), ud = to_double(up), dhd = to_double(dh);
    ref::relu2_glu_forward(ref_h.data(), gd.data(), ud.data(), n);
    ref::relu2_glu_backward(ref_dgate.data(), ref_dup.data(), dhd.data(), gd.data(), ud.data(), n);
    expect_close(h, ref_h, 1e-6, "h");
    expect_close(dgate, ref_dgate, 1e-6, "dgate");
    expect_close(dup, ref_dup, 1e-6, "dup");
    EXPECT_EQ(parse_gated_activation("relu2"), GatedActivation::relu2);
    try {
        parse_gated_activation("gelu");
        ADD_FAILURE() << "gelu was accepted";
    } catch (const Error& e) {
        EXPECT_STREQ(e.what(), "unknown FFN activation 'gelu': use silu (SwiGLU) or relu2 (ReLU^2-GLU)");
    }
}

// ---------------------------------------------------------------------------------------------
// Cross-entropy

TEST(KernelCrossEntropy, ReferenceBackwardMatchesFiniteDifferences) {
    Random rng;
    SCOPED_TRACE(rng.trace());
    const int rows = 3, vocab = 11;
    Doubles logits = rng.normal(rows * vocab, 2.0);
    const std::vector<int32_t> targets = rng.ints(rows, vocab);
    // The loss is already a scalar: grad_scale 1 gives its exact gradient.
    auto loss = [&] {
        return ref::cross_entropy_forward_backward(nullptr, logits.data(), targets.data(), rows, vocab, 1.0);
    };
    Doubles dlogits(rows * vocab);
    ref::cross_entropy_forward_backward(dlogits.data(), logits.data(), targets.data(), rows, vocab, 1.0);
    expect_close(dlogits, numeric_gradient(logits, loss), kFiniteDifferenceTol, "dlogits");
}

TEST(KernelCrossEntropy, FastMatchesReference) {
    Random rng;
    SCOPED_TRACE(rng.trace());
    for (const auto& [rows, vocab, offset] : {std::tuple{7, 37, 0.0}, std::tuple{16, 1000, 0.0},
                                              std::tuple{5, 257, 1000.0}}) {
        SCOPED_TRACE("rows " + std::to_string(rows) + " vocab " + std::to_string(vocab) + " offset " +
                     std::to_string(offset));
        Doubles logits_d = rng.normal(static_cast<size_t>(rows) * vocab, 3.0);
        for (double& z : logits_d) z += offset;  // stability: large logits must not overflow exp
        const Floats logits = to_float(logits_d);
        const std::vector<int32_t> targets = rng.ints(rows, vocab);
        const float grad_scale = 0.25f;

        Floats dlogits(logits.size(), 123.0f);  // written, not accumulated
        const float loss = cross_entropy_forward_backward(dlogits.data(), logits.data(), targets.data(), rows, vocab,
                                                          grad_scale);
        const float eval_loss =
            cross_entropy_forward_backward(nullptr, logits.data(), targets.data(), rows, vocab, grad_scale);
        Floats in_place = logits;  // dlogits may alias logits
        const float in_place_loss = cross_entropy_forward_backward(in_place.data(), in_place.data(), targets.data(),
                                                                   rows, vocab, grad_scale);

        const Doubles ld = to_double(logits);
        Doubles ref_dlogits(logits.size());
        const double ref_loss =
            ref::cross_entropy_forward_backward(ref_dlogits.data(), ld.data(), targets.data(), rows, vocab, grad_scale);
        EXPECT_NEAR(loss, ref_loss, 1e-6 * std::abs(ref_loss) + 1e-6);
        EXPECT_EQ(eval_loss, loss);
        EXPECT_EQ(in_place_loss, loss);
        expect_close(dlogits, ref_dlogits, 1e-6, "dlogits");
        EXPECT_EQ(in_place, dlogits);
    }
}

TEST(KernelCrossEntropy, TargetOutsideVocabularyIsAnError) {
    const Floats logits(8, 0.0f);
    const std::vector<int32_t> targets = {1, 4};
    EXPECT_THROW(cross_entropy_forward_backward(nullptr, logits.data(), targets.data(), 2, 4, 1.0f), Error);
}

// ---------------------------------------------------------------------------------------------
// Embedding

TEST(KernelEmbedding, ReferenceBackwardMatchesFiniteDifferences) {
    Random rng;
    SCOPED_TRACE(rng.trace());
    const int vocab = 5, dim = 3, count = 8;  // more tokens than rows: repeats guaranteed
    Doubles table = rng.normal(vocab * dim);
    const std::vector<int32_t> tokens = rng.ints(count, vocab);
    const Doubles R = rng.normal(count * dim);
    auto loss = [&] {
        Doubles out(count * dim);
        ref::embedding_forward(out.data(), tokens.data(), table.data(), count, dim);
        return dot(out, R);
    };
    Doubles dtable(vocab * dim);
    ref::embedding_backward(dtable.data(), R.data(), tokens.data(), count, dim);
    expect_close(dtable, numeric_gradient(table, loss), kFiniteDifferenceTol, "dtable");
}

TEST(KernelEmbedding, FastMatchesReference) {
    Random rng;
    SCOPED_TRACE(rng.trace());
    const int vocab = 13, dim = 37, count = 50;
    const Floats table = to_float(rng.normal(vocab * dim)), dout = to_float(rng.normal(count * dim));
    const std::vector<int32_t> tokens = rng.ints(count, vocab);
    Floats out(count * dim), dtable = to_float(rng.normal(vocab * dim));
    Doubles ref_out(count * dim), ref_dtable = to_double(dtable);
    embedding_forward(out.data(), tokens.data(), table.data(), count, dim);
    embedding_backward(dtable.data(), dout.data(), tokens.data(), count, dim);
    const Doubles td = to_double(table), dd = to_double(dout);
    ref::embedding_forward(ref_out.data(), tokens.data(), td.data(), count, dim);
    ref::embedding_backward(ref_dtable.data(), dd.data(), tokens.data(), count, dim);
    expect_close(out, ref_out, 0.0, "out");  // a copy
    expect_close(dtable, ref_dtable, 1e-6, "dtable");
}

TEST(KernelEmbedding, BackwardBitIdenticalForOneAndTwoThreads) {
    Random rng;
    SCOPED_TRACE(rng.trace());
    const int vocab = 7, dim = 100, count = 300;
    const Floats dout = to_float(rng.normal(count * dim));
    const std::vector<int32_t> tokens = rng.ints(count, vocab);
    const Floats start = to_float(rng.normal(vocab * dim));
    Floats one = start, two = start;
    with_threads(1, [&] { embedding_backward(one.data(), dout.data(), tokens.data(), count, dim); });
    with_threads(2, [&] { embedding_backward(two.data(), dout.data(), tokens.data(), count, dim); });
    EXPECT_EQ(one, two);
}

// ---------------------------------------------------------------------------------------------
// Shared helpers

TEST(KernelVecmath, ExpMatchesStdExp) {
    const int n = 200001;
    double worst = 0;
    for (int i = 0; i < n; ++i) {
        const float x = -86.0f + 174.0f * i / (n - 1);
        const double expected = std::exp(static_cast<double>(x));
        worst = std::max(worst, std::abs(exp_f32(x) - expected) / expected);
    }
    EXPECT_LT(worst, 2e-7);
    // Out-of-range inputs clamp; NaN propagates.
    EXPECT_GT(exp_f32(-INFINITY), 0.0f);
    EXPECT_LT(exp_f32(-INFINITY), 1e-37f);
    EXPECT_LT(exp_f32(-1000.0f), 1e-37f);
    EXPECT_GT(exp_f32(INFINITY), 1e38f);
    EXPECT_EQ(exp_f32(88.5f), exp_f32(88.0f));
    EXPECT_EQ(exp_f32(-86.5f), exp_f32(-86.0f));
    EXPECT_LT(exp_f32(87.9f), exp_f32(88.0f));
    EXPECT_GT(exp_f32(-85.9f), exp_f32(-86.0f));
    // NaN in, the same NaN out (payload and sign).
    for (const uint32_t nan_bits : {0x7fc00000u, 0xffc00001u, 0x7f800001u, 0xffffffffu})
        EXPECT_EQ(std::bit_cast<uint32_t>(exp_f32(std::bit_cast<float>(nan_bits))), nan_bits);
}

// max_zero_f32 is std::max(x, 0.0f) bit for bit: on every 4,099th bit pattern (about a million,
// across every sign, exponent and NaN) and on the edges.
TEST(KernelVecmath, MaxZeroIsStdMaxBitForBit) {
    std::vector<uint32_t> patterns = {0x00000000u, 0x80000000u, 0x00000001u, 0x80000001u, 0x7f800000u,
                                      0xff800000u, 0x7f800001u, 0xff800001u, 0x7fffffffu, 0xffffffffu};
    for (uint64_t bits = 0; bits < (uint64_t{1} << 32); bits += 4099) patterns.push_back(static_cast<uint32_t>(bits));
    for (const uint32_t bits : patterns) {
        const float x = std::bit_cast<float>(bits);
        ASSERT_EQ(std::bit_cast<uint32_t>(max_zero_f32(x)), std::bit_cast<uint32_t>(std::max(x, 0.0f))) << std::hex << bits;
    }
}

// fp16 <-> fp32 (kernels/float16_widen.h): the vector paths against the per-value references on
// fresh random values, every length from 0 to 40 (whole vectors and tails). Narrowing says
// exact only where every value is an fp16; one value off the grid (or a NaN) anywhere says not.
TEST(KernelFloat16, WideningAndExactNarrowingMatchTheReferences) {
    std::mt19937 rng(static_cast<uint32_t>(dqt::testing::test_seed()));
    std::normal_distribution<float> normal(0.0f, 3.0f);
    for (size_t count = 0; count <= 40; ++count) {
        std::vector<Float16> halves(count);
        for (Float16& h : halves) h = static_cast<Float16>(normal(rng));
        std::vector<float> fast(count), slow(count);
        widen_f16(halves.data(), fast.data(), count);
        widen_f16_reference(halves.data(), slow.data(), count);
        EXPECT_EQ(fast, slow);
        for (size_t i = 0; i < count; ++i) EXPECT_EQ(static_cast<float>(halves[i]), slow[i]);

        std::vector<Float16> back(count), back_reference(count);
        ASSERT_TRUE(narrow_f16_exactly(slow.data(), back.data(), count));
        ASSERT_TRUE(narrow_f16_exactly_reference(slow.data(), back_reference.data(), count));
        for (size_t i = 0; i < count; ++i) EXPECT_EQ(static_cast<float>(back[i]), slow[i]);
        if (count == 0) continue;
        for (const float off_grid : {1.0f + 1.0f / 4096, 70000.0f, NAN}) {  // between fp16s, beyond them, NaN
            std::vector<float> inexact = slow;
            inexact[count / 2] = off_grid;
            EXPECT_FALSE(narrow_f16_exactly(inexact.data(), back.data(), count)) << count << " values, " << off_grid;
            EXPECT_FALSE(narrow_f16_exactly_reference(inexact.data(), back.data(), count));
        }
    }
}

// The fp16 products' paths this CPU runs (the reference's own results are the expectation).
std::vector<HalfIsa> supported_half_isas() {
    std::vector<HalfIsa> isas;
    for (const HalfIsa isa : {HalfIsa::avx2, HalfIsa::avx512})
        if (half_isa_supported(isa)) isas.push_back(isa);
    return isas;
}

// The fp16 decode product (kernels/half_gemv.h) on every path this CPU has against its
// reference, bit for bit, on fresh random rows: widths with and without a 16-element tail and
// an odd block count, row ranges that leave rows outside the AVX-512 path's 4-row groups, and against a
// double-precision sum to tolerance.
TEST(KernelHalfGemv, MatchesTheReferenceBitForBitAndTheExactSumClosely) {
    std::mt19937 rng(static_cast<uint32_t>(dqt::testing::test_seed()));
    std::normal_distribution<float> normal(0.0f, 1.0f);
    if (supported_half_isas().empty()) GTEST_SKIP() << "no AVX2 with FMA and F16C: only the reference runs here";
    for (const HalfIsa isa : supported_half_isas()) {
        for (const int cols : {16, 40, 48, 2560, 2567}) {
            const int rows = 11;
            std::vector<float> x(static_cast<size_t>(cols));
            for (float& v : x) v = normal(rng);
            std::vector<Float16> w(static_cast<size_t>(rows) * cols);
            for (Float16& v : w) v = static_cast<Float16>(0.05f * normal(rng));
            for (const auto& [first, last] : {std::pair{0, rows}, std::pair{3, 10}, std::pair{5, 6}}) {
                SCOPED_TRACE(std::string(half_isa_name(isa)) + ", " + std::to_string(cols) + " columns, rows " +
                             std::to_string(first) + ".." + std::to_string(last));
                std::vector<float> fast(static_cast<size_t>(rows), -1.0f), slow(static_cast<size_t>(rows), -1.0f);
                half_gemv_rows(x.data(), w.data(), cols, fast.data(), first, last, isa);
                half_gemv_rows_reference(x.data(), w.data(), cols, slow.data(), first, last);
                EXPECT_EQ(fast, slow);
                for (int j = 0; j < rows; ++j) {
                    if (j < first || j >= last) {
                        EXPECT_EQ(fast[j], -1.0f);  // rows outside the range are not written
                        continue;
                    }
                    double exact = 0.0, magnitude = 0.0;
                    for (int k = 0; k < cols; ++k) {
                        exact += static_cast<double>(x[k]) * static_cast<float>(w[static_cast<size_t>(j) * cols + k]);
                        magnitude += std::fabs(static_cast<double>(x[k]) * static_cast<float>(w[static_cast<size_t>(j) * cols + k]));
                    }
                    EXPECT_NEAR(fast[j], exact, 1e-5 * magnitude);  // fp32 sums of 2,567 terms
                }
            }
        }
    }
}

// The batched fp16 product gives every activation row the single-row kernel's result bit for
// bit (and so the reference's), on every path this CPU has, for 1 to 19 rows (groups of 8 or 3
// and the remainders), into a wider output whose other columns it leaves alone.
TEST(KernelHalfGemv, BatchedRowsEachGetTheSingleRowResultBitForBit) {
    std::mt19937 rng(static_cast<uint32_t>(dqt::testing::test_seed()));
    std::normal_distribution<float> normal(0.0f, 1.0f);
    const int cols = 2567, weight_rows = 9, stride = 12, first = 2, last = 9;
    std::vector<Float16> w(static_cast<size_t>(weight_rows) * cols);
    for (Float16& v : w) v = static_cast<Float16>(0.05f * normal(rng));
    if (supported_half_isas().empty()) GTEST_SKIP() << "no AVX2 with FMA and F16C: only the reference runs here";
    for (const HalfIsa isa : supported_half_isas()) {
        for (const int n : {1, 2, 7, 8, 9, 19}) {
            SCOPED_TRACE(std::string(half_isa_name(isa)) + ", " + std::to_string(n) + " activation rows");
            std::vector<float> x(static_cast<size_t>(n) * cols);
            for (float& v : x) v = normal(rng);
            std::vector<float> batched(static_cast<size_t>(n) * stride, -1.0f), single(batched.size(), -1.0f),
                reference(batched.size(), -1.0f);
            half_gemm_rows(x.data(), n, w.data(), cols, batched.data(), stride, first, last, isa);
            for (int i = 0; i < n; ++i) {
                const float* xi = x.data() + static_cast<size_t>(i) * cols;
                half_gemv_rows(xi, w.data(), cols, single.data() + static_cast<size_t>(i) * stride, first, last, isa);
                half_gemv_rows_reference(xi, w.data(), cols, reference.data() + static_cast<size_t>(i) * stride, first, last);
            }
            EXPECT_EQ(batched, single);
            EXPECT_EQ(batched, reference);
            EXPECT_EQ(batched[0], -1.0f);                // column 0 is outside the rows asked for
            EXPECT_EQ(batched[stride - 1], -1.0f);       // and so is every column past the weight rows
        }
    }
}
