// The training methods: the DQT update against a float64 reference, stochastic versus
// nearest rounding of small updates, bitnet's straight-through gradients, and what each
// method stores.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "core/error.h"
#include "core/memory.h"
#include "model/initialization.h"
#include "model/llama.h"
#include "model/method.h"
#include "model/ternary_convert.h"
#include "model/weight_access.h"
#include "optim/dqt_update.h"
#include "optim/optimizer.h"
#include "optim/scale_gradient.h"
#include "quant/activation_quant.h"
#include "quant/codes.h"
#include "quant/ternary.h"
#include "test_helpers.h"
#include "gradient_buffer.h"

using namespace dqt;

namespace {

ModelConfig small_config() {
    ModelConfig c;
    c.dim = 16;
    c.n_layers = 1;
    c.n_heads = 2;
    c.n_kv_heads = 2;
    c.ffn_dim = 24;
    c.vocab_size = 13;
    c.seq_len = 8;
    return c;
}

// One whole-tensor DQT step with fp32 moments m, v (count each), its scale gradient summed by
// the update itself.
void dqt_step(const CodedTensor& tensor, const float* g, TensorMoments& moments, const AdamWConfig& config, float lr,
              int64_t t, const DqtRounding& rounding) {
    const DqtStep step(tensor, config, lr, t, rounding);
    const ExactSum reference_dot = code_gradient_dot(g, tensor.codes, tensor.grid, 0, tensor.count);
    ExactSum dot = 0;
    step.apply(g, moments, 0, tensor.count, &dot);
    // The update's own sum (a learned scale) is the standalone one's, bit for bit.
    if (rounding.scale_rule == ScaleRule::learned) {
        EXPECT_TRUE(dot == reference_dot);
    }
    step.finish(moments, exact_sum_value(dot));
}

// The rounding uniforms of a tensor's count elements at step t, as the update draws them.
std::vector<float> tensor_uniforms(uint64_t seed, int64_t t, int tensor_id, size_t count) {
    std::vector<float> u(count);
    for (size_t group = 0; group < (count + 3) / 4; ++group) {
        const auto draw = rounding_uniforms(seed, t, tensor_id, group);
        for (size_t k = 0; k < 4 && group * 4 + k < count; ++k) u[group * 4 + k] = draw[k];
    }
    return u;
}

MethodConfig dqt_method(int bits) {
    MethodConfig m;
    m.kind = Method::dqt;
    m.grid = CodeGrid{bits};
    return m;
}

// Adam without memory or decay: m = g, so every step is lr * sign(g) (eps negligible).
AdamWConfig sign_step_config() {
    AdamWConfig config;
    config.weight_decay = 0.0f;
    config.beta1 = 0.0f;
    config.beta2 = 0.0f;
    return config;
}

}  // namespace

// Five DQT steps on one tensor with fresh random codes and gradients: every code, the scale
// and the moments equal a float64 implementation of the update of docs/METHOD.md section 2 fed the same uniforms,
// under both scale rules. A code may differ only where x sits within float rounding of its
// rounding threshold.
TEST(DqtUpdate, MatchesFloat64ReferenceOverSeveralSteps) {
    const uint64_t seed = dqt::testing::test_seed();
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937 rng(seed);
    for (const ScaleRule rule : {ScaleRule::reference, ScaleRule::learned})
    for (const int bits : {1, 4, 8}) {
        for (const Rounding mode : {Rounding::stochastic, Rounding::nearest}) {
            SCOPED_TRACE(std::string(scale_rule_name(rule)) + " scale, bits " + std::to_string(bits));
            const CodeGrid grid{bits};
            const size_t count = 1003;  // ragged: the last packed byte is partial
            const int tensor_id = 5;
            std::uniform_int_distribution<int> pick(grid.qn(), grid.qp());
            std::vector<uint8_t> codes(code_bytes(grid, count));
            std::vector<int> q(count);
            for (size_t i = 0; i < count; ++i) {
                q[i] = pick(rng);
                write_code(codes.data(), grid, i, q[i]);
            }
            float scale = grid.qp() / 0.03f;
            double scale_ref = scale;
            double scale_m_ref = 0.0, scale_v_ref = 0.0;
            TensorMoments moments(0, count, StateDtype::fp32);
            const float* m = moments.m.as<float>();
            const float* v = moments.v.as<float>();
            std::vector<float> g(count);
            std::vector<double> m_ref(count, 0.0), v_ref(count, 0.0), g_ref(count);
            AdamWConfig config;
            config.beta1 = 0.9f;
            config.beta2 = 0.999f;
            config.eps = 1e-6f;
            config.weight_decay = 0.01f;
            // Step sizes of a sizeable fraction of a grid step, so codes really move.
            const float lr = 0.7f / scale;
            int ties = 0, moved = 0;
            for (int64_t t = 1; t <= 5; ++t) {
                std::normal_distribution<float> normal(0.0f, 0.01f);
                for (size_t i = 0; i < count; ++i) g_ref[i] = g[i] = normal(rng);
                const std::vector<float> u = tensor_uniforms(seed, t, tensor_id, count);
                const CodedTensor tensor{codes.data(), &scale, count, grid, tensor_id};
                dqt_step(tensor, g.data(), moments, config, lr, t, DqtRounding{mode, seed, rule});
                const std::vector<int> q_before = q;
                const double scale_before = scale_ref;
                scale_ref = dqt_update_reference(q.data(), scale_ref, m_ref.data(), v_ref.data(), g_ref.data(),
                                                 u.data(), count, grid, config, lr, t, mode, rule, scale_m_ref,
                                                 scale_v_ref);
                ASSERT_NEAR(scale, scale_ref, 1e-5 * scale_ref);
                if (rule == ScaleRule::learned) {
                    // Adam's first step, in log units: lr sqrt(v) / (sqrt(v) + eps) with
                    // v = (1 - b2) g^2, so about lr.
                    if (t == 1) {
                        const double root_v = std::sqrt(scale_v_ref);
                        const double expected = lr * root_v / (root_v + config.eps);
                        EXPECT_NEAR(std::fabs(std::log(scale_ref / scale_before)), expected, 1e-4 * lr);
                        EXPECT_GT(expected, 0.5 * lr);
                    }
                    // m can cancel to far below the gradients it sums: relative to sqrt(v).
                    EXPECT_NEAR(moments.scale_moments[0], scale_m_ref, 1e-5 * std::sqrt(scale_v_ref));
                    EXPECT_NEAR(moments.scale_moments[1], scale_v_ref, 1e-5 * scale_v_ref + 1e-20);
                    scale = static_cast<float>(scale_ref);  // compare later steps from the same scale
                }
                for (size_t i = 0; i < count; ++i) {
                    ASSERT_NEAR(m[i], m_ref[i], 1e-6 + 1e-5 * std::fabs(m_ref[i]));
                    ASSERT_NEAR(v[i], v_ref[i], 1e-9 + 1e-5 * std::fabs(v_ref[i]));
                    const int fast = read_code(codes.data(), grid, i);
                    moved += q[i] != q_before[i];
                    if (fast == q[i]) continue;
                    // A float-versus-double tie at a rounding threshold: one step apart at most,
                    // and rare (counted below). Re-sync so later steps compare the same state.
                    ASSERT_LE(std::abs(fast - q[i]), 1) << grid.label() << " element " << i;
                    ++ties;
                    q[i] = fast;
                }
            }
            EXPECT_LE(ties, 3) << grid.label() << " " << rounding_name(mode);
            EXPECT_GT(moved, static_cast<int>(count) / 4) << "the update barely moved any code";
        }
    }
}

// Updates of 0.1 grid step: nearest rounding returns every code unchanged, so training
// cannot move; stochastic rounding moves a tenth of the codes a whole step, so the mean
// weight follows the update in expectation.
TEST(DqtUpdate, NearestLosesSmallUpdatesStochasticKeepsThemInExpectation) {
    const CodeGrid grid{1};
    const size_t count = 40000;
    const float scale = 50.0f;  // one grid step = 0.02
    AdamWConfig config;
    config.weight_decay = 0.0f;
    // First Adam step: m / (sqrt(v) + eps) = sign(g) (eps negligible), so W' = W - lr * sign(g).
    const float lr = 0.1f / scale;  // a tenth of a grid step
    const std::vector<float> g(count, 1.0f);
    for (const Rounding mode : {Rounding::nearest, Rounding::stochastic}) {
        std::vector<uint8_t> codes(code_bytes(grid, count));
        for (size_t i = 0; i < count; ++i) write_code(codes.data(), grid, i, i % 2 == 0 ? 1 : 0);  // top code in use
        TensorMoments moments(0, count, StateDtype::fp32);
        float s = scale;
        dqt_step(CodedTensor{codes.data(), &s, count, grid, 3}, g.data(), moments, config, lr, 1,
                 DqtRounding{mode, 77});
        EXPECT_EQ(s, scale);
        double moved = 0.0;
        for (size_t i = 0; i < count; ++i) moved += (i % 2 == 0 ? 1 : 0) - read_code(codes.data(), grid, i);
        const double mean_step = moved / count;  // in grid steps, expected 0.1
        if (mode == Rounding::nearest) {
            EXPECT_EQ(moved, 0.0);
        } else {
            EXPECT_NEAR(mean_step, 0.1, 5.0 * 0.3 / std::sqrt(double(count)));
        }
    }
}

// With sub-grid residuals, five steps on fresh random codes, residuals and gradients: every
// code and residual equals the float64 reference fed the same uniforms (the weight's position
// q R + r on the fine grid at most one fine step off, and rarely: a float-versus-double tie).
// With an overhang, some weights at the outer codes move past them (r beyond R/2) and stay there.
TEST(DqtUpdate, ResidualsMatchFloat64Reference) {
    const uint64_t seed = dqt::testing::test_seed();
    SCOPED_TRACE(dqt::testing::seed_trace(seed));
    std::mt19937 rng(seed);
    struct ResidualCase {
        int residual_bits, overhang;
    };
    for (const int bits : {1, 4})
    for (const ResidualCase c : {ResidualCase{1, 0}, {3, 0}, {8, 0}, {1, 3}, {3, 2}, {6, 1}})
    for (const Rounding mode : {Rounding::stochastic, Rounding::nearest}) {
        const int residual_bits = c.residual_bits;
        SCOPED_TRACE("bits " + std::to_string(bits) + ", residual bits " + std::to_string(residual_bits) +
                     ", overhang " + std::to_string(c.overhang) + ", " + rounding_name(mode));
        const CodeGrid grid{bits};
        const int steps = 1 << residual_bits;
        const size_t count = 1003;
        const int tensor_id = 2;
        std::uniform_int_distribution<int> pick(grid.qn(), grid.qp()), pick_r(-steps / 2, steps / 2 - 1);
        std::vector<uint8_t> codes(code_bytes(grid, count));
        std::vector<int> q(count), r(count);
        TensorMoments moments(0, count, StateDtype::fp32, true);
        for (size_t i = 0; i < count; ++i) {
            q[i] = pick(rng);
            r[i] = pick_r(rng);
            write_code(codes.data(), grid, i, q[i]);
            moments.residual[i] = static_cast<int8_t>(r[i]);
        }
        float scale = grid.qp() / 0.03f;
        double scale_ref = scale, scale_m_ref = 0.0, scale_v_ref = 0.0;
        std::vector<float> g(count);
        std::vector<double> m_ref(count, 0.0), v_ref(count, 0.0), g_ref(count);
        AdamWConfig config;
        config.weight_decay = 0.01f;
        const float lr = 0.3f / scale;  // a third of a grid step: codes move, residuals more so
        int ties = 0, moved = 0, past_the_ends = 0;
        for (int64_t t = 1; t <= 5; ++t) {
            std::normal_distribution<float> normal(0.0f, 0.01f);
            for (size_t i = 0; i < count; ++i) g_ref[i] = g[i] = normal(rng);
            const std::vector<float> u = tensor_uniforms(seed, t, tensor_id, count);
            dqt_step(CodedTensor{codes.data(), &scale, count, grid, tensor_id}, g.data(), moments, config, lr, t,
                     DqtRounding{mode, seed, ScaleRule::learned, residual_bits, c.overhang});
            const std::vector<int> q_before = q;
            scale_ref = dqt_update_reference(q.data(), scale_ref, m_ref.data(), v_ref.data(), g_ref.data(), u.data(),
                                             count, grid, config, lr, t, mode, ScaleRule::learned, scale_m_ref,
                                             scale_v_ref, r.data(), residual_bits, c.overhang);
            ASSERT_NEAR(scale, scale_ref, 1e-5 * scale_ref);
            scale = static_cast<float>(scale_ref);
            for (size_t i = 0; i < count; ++i) {
                const int fast_q = read_code(codes.data(), grid, i), fast_r = moments.residual[i];
                const bool at_bottom = fast_q == grid.qn(), at_top = fast_q == grid.qp();
                const int lowest_r = at_bottom ? -c.overhang * steps : -steps / 2;
                const int highest_r = at_top ? c.overhang * steps : steps / 2 - 1;
                ASSERT_TRUE(fast_r >= std::min(lowest_r, -steps / 2) && fast_r <= std::max(highest_r, steps / 2 - 1))
                    << "residual " << fast_r << " at " << i;
                past_the_ends += (at_top && fast_r >= steps / 2) || (at_bottom && fast_r < -steps / 2);
                moved += q[i] != q_before[i];
                if (fast_q == q[i] && fast_r == r[i]) continue;
                ASSERT_LE(std::abs((fast_q * steps + fast_r) - (q[i] * steps + r[i])), 1) << "element " << i;
                ++ties;
                q[i] = fast_q;
                r[i] = fast_r;
            }
        }
        EXPECT_LE(ties, 3);
        EXPECT_GT(moved, static_cast<int>(count) / 20) << "the update barely moved any code";
        if (c.overhang == 0) {
            EXPECT_EQ(past_the_ends, 0);
        } else if (bits == 1) {  // a third of the codes sit at an end; some are pushed past it
            EXPECT_GT(past_the_ends, static_cast<int>(count) / 50);
        }
    }
}

// Hysteresis: a ternary weight at +1 pushed up eight eighths of a grid step, then down as far,
// is still +1 with an overhang (its fine position ran to 2 and came back to 1); clipped at the
// grid's end it is 0. Sixteen steps down from there end at 0 with either.
TEST(DqtUpdate, AnOverhangFlipsBackLater) {
    const CodeGrid grid{1};
    const size_t count = 64;
    const AdamWConfig config = sign_step_config();
    const float scale = 64.0f;  // powers of two: every position below is exact
    const float lr = 0.125f / scale;
    const std::vector<float> up(count, -1.0f), down(count, 1.0f);
    for (const int overhang : {0, 2}) {
        std::vector<uint8_t> codes(code_bytes(grid, count));
        for (size_t i = 0; i < count; ++i) write_code(codes.data(), grid, i, 1);
        TensorMoments moments(0, count, StateDtype::fp32, true);
        float s = scale;
        int64_t t = 0;
        auto push = [&](const std::vector<float>& g, int times) {
            for (int k = 0; k < times; ++k) {
                dqt_step(CodedTensor{codes.data(), &s, count, grid, 3}, g.data(), moments, config, lr, ++t,
                         DqtRounding{Rounding::nearest, 5, ScaleRule::reference, 4, overhang});
            }
        };
        push(up, 8);
        EXPECT_EQ(read_code(codes.data(), grid, 0), 1);
        EXPECT_EQ(moments.residual[0], overhang > 0 ? 16 : 0);  // one grid step past +1, or clipped there
        push(down, 8);
        for (size_t i = 0; i < count; ++i) EXPECT_EQ(read_code(codes.data(), grid, i), overhang > 0 ? 1 : 0) << i;
        push(down, overhang > 0 ? 8 : 0);
        for (size_t i = 0; i < count; ++i) EXPECT_EQ(read_code(codes.data(), grid, i), 0) << i;
    }
}

// A run's residuals start where its real values lie: the codes stay as they were made (here
// nearest, and for a few elements a code one step off, as another conversion may leave them),
// and q + r / R is w s on the fine grid to half a fine step wherever that lies in the code's
// cell; elsewhere r sits at the cell's edge. Past the grid's ends the cell reaches H steps out
// with an overhang. Only the residuals of the share [first, first + part) are written.
TEST(DqtUpdate, ResidualsStartAtTheRealValues) {
    std::mt19937 rng(dqt::testing::test_seed());
    struct ResidualCase {
        int residual_bits, overhang;
    };
    for (const int bits : {1, 4})
    for (const ResidualCase c : {ResidualCase{2, 0}, {8, 0}, {2, 3}, {4, 1}}) {
        SCOPED_TRACE("bits " + std::to_string(bits) + "/" + std::to_string(c.residual_bits) + ", overhang " +
                     std::to_string(c.overhang));
        const CodeGrid grid{bits};
        const size_t count = 2048, first = 512, part = 1024;
        std::normal_distribution<float> normal(0.0f, 0.05f);
        std::vector<float> w(count);
        for (float& x : w) x = normal(rng);
        const float scale = grid.qp() / 0.06f;  // some weights beyond the grid's ends
        std::vector<uint8_t> codes(code_bytes(grid, count));
        quantize_nearest(codes.data(), w.data(), count, grid, scale);
        for (size_t i = first; i < first + part; i += 97) {  // a code one step off
            const int q = read_code(codes.data(), grid, i);
            write_code(codes.data(), grid, i, q == grid.qp() ? q - 1 : q + 1);
        }
        const std::vector<uint8_t> codes_before = codes;
        std::vector<int8_t> r(part, 99);
        start_residuals(w.data() + first, part, scale, grid, c.residual_bits, c.overhang, codes.data(), first,
                        r.data());
        EXPECT_EQ(codes, codes_before);
        const double steps = std::ldexp(1.0, c.residual_bits);
        int past_the_ends = 0, at_an_edge = 0;
        for (size_t i = 0; i < part; ++i) {
            const int q = read_code(codes.data(), grid, first + i);
            const double lowest = q == grid.qn() && c.overhang > 0 ? -c.overhang : -0.5;
            const double highest = q == grid.qp() && c.overhang > 0 ? c.overhang : 0.5 - 1 / steps;
            const double offset = static_cast<double>(w[first + i]) * scale - q;  // in grid steps
            ASSERT_LE(std::fabs(r[i] / steps - std::clamp(offset, lowest, highest)), 0.5 / steps + 1e-5) << i;
            past_the_ends += r[i] / steps < -0.5 || r[i] / steps >= 0.5;
            at_an_edge += offset < lowest || offset > highest;
        }
        EXPECT_GE(at_an_edge, static_cast<int>(part / 97) / 2);  // most off-by-one codes, and clipped values
        if (c.overhang > 0) {
            EXPECT_GT(past_the_ends, 0);
        } else {
            EXPECT_EQ(past_the_ends, 0);
        }
    }
}

// Updates of a tenth of a grid step in one direction: with nearest rounding and no residual
// no code ever moves; with an 8-bit residual the steps add up, and after ten of them every
// weight has moved one whole grid step, with no randomness at all.
TEST(DqtUpdate, ResidualsAccumulateUpdatesSmallerThanAGridStep) {
    const CodeGrid grid{1};
    const size_t count = 64;
    const AdamWConfig config = sign_step_config();
    const float scale = 50.0f;
    const float lr = 0.1f / scale;
    const std::vector<float> g(count, 1.0f);
    for (const int residual_bits : {0, 8}) {
        std::vector<uint8_t> codes(code_bytes(grid, count));
        for (size_t i = 0; i < count; ++i) write_code(codes.data(), grid, i, 1);
        TensorMoments moments(0, count, StateDtype::fp32, residual_bits > 0);
        float s = scale;
        for (int64_t t = 1; t <= 10; ++t) {
            dqt_step(CodedTensor{codes.data(), &s, count, grid, 3}, g.data(), moments, config, lr, t,
                     DqtRounding{Rounding::nearest, 5, ScaleRule::reference, residual_bits});
        }
        for (size_t i = 0; i < count; ++i) {
            // 1 - 10 x 0.1 = 0, up to float rounding of the residual's last step.
            EXPECT_EQ(read_code(codes.data(), grid, i), residual_bits > 0 ? 0 : 1) << residual_bits;
        }
    }
}

// The scale follows the reference code's rule s = qp / max(W): unchanged while a code sits
// at qp, rescaled when none does.
TEST(DqtUpdate, ScaleIsKeptWhileTheTopCodeIsUsed) {
    const CodeGrid grid{4};  // [-8, 7]
    std::vector<uint8_t> codes(code_bytes(grid, 8));
    for (int i = 0; i < 8; ++i) write_code(codes.data(), grid, i, i - 4);  // max code 3 < qp
    std::vector<float> g(8, 0.0f);
    TensorMoments moments(0, 8, StateDtype::fp32);
    float s = 10.0f;
    AdamWConfig config;
    config.weight_decay = 0.0f;
    dqt_step(CodedTensor{codes.data(), &s, 8, grid, 0}, g.data(), moments, config, 0.0f, 1,
             DqtRounding{Rounding::nearest, 1});
    EXPECT_FLOAT_EQ(s, 10.0f * 7.0f / 3.0f);
    EXPECT_EQ(read_code(codes.data(), grid, 7), 7);  // the old top weight 3/10 is the new qp
    dqt_step(CodedTensor{codes.data(), &s, 8, grid, 0}, g.data(), moments, config, 0.0f, 2,
             DqtRounding{Rounding::nearest, 1});
    EXPECT_FLOAT_EQ(s, 10.0f * 7.0f / 3.0f);
}

// Bitnet's straight-through gradients of one quantized linear, against central differences
// of the STE surrogate f(x, W) = sum(dout * ((x + cx) (W + cW)^T)), where cx = Q(x0) - x0 and
// cW = Q(W0) - W0 are frozen at the base point (the surrogate equals the quantized forward
// there and its derivative is the straight-through gradient). Float64 differences.
TEST(BitnetSte, LinearGradientsMatchFiniteDifferencesOfTheSurrogate) {
    const uint64_t seed = dqt::testing::test_seed();
    SCOPED_TRACE("seed " + std::to_string(seed));
    MethodConfig method;
    method.kind = Method::bitnet;
    ModelParameters model(small_config(), method);
    initialize_parameters(model, seed);
    const ParamTensor& weight = *model.tensors.layers[0].w_gate;  // (F, C) = (24, 16)
    ASSERT_TRUE(weight.quantized());
    const int rows = 6, in = weight.cols, out = weight.rows;

    std::mt19937 rng(seed);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> x0(rows * in), dout(rows * out);
    for (float& value : x0) value = normal(rng);
    for (float& value : dout) value = normal(rng);

    // Analytic: the path the model takes.
    std::vector<float> xq = x0;
    const LinearInput prepared(model, weight, xq.data(), rows);
    std::vector<float> y(rows * out), din(rows * in, 0.0f);
    weight_linear_forward(model, weight, y.data(), prepared, rows);
    std::vector<float> dw(weight.count(), 0.0f);
    weight_linear_backward_input(model, weight, din.data(), dout.data(), rows);
    weight_linear_backward_weight(model, weight, dw.data(), dout.data(), xq.data(), rows, 0, weight.rows);

    // Frozen offsets of the surrogate.
    const float* w0 = model.value(weight);
    std::vector<float> wq(weight.count());
    absmean_ternarize(wq.data(), w0, weight.count());
    std::vector<double> cx(rows * in), cw(weight.count());
    for (size_t i = 0; i < cx.size(); ++i) cx[i] = double(xq[i]) - x0[i];
    for (size_t i = 0; i < cw.size(); ++i) cw[i] = double(wq[i]) - w0[i];
    auto surrogate = [&](const std::vector<double>& x, const std::vector<double>& w) {
        double sum = 0.0;
        for (int r = 0; r < rows; ++r)
            for (int o = 0; o < out; ++o) {
                double dot = 0.0;
                for (int i = 0; i < in; ++i) dot += (x[r * in + i] + cx[r * in + i]) * (w[o * in + i] + cw[o * in + i]);
                sum += dout[r * out + o] * dot;
            }
        return sum;
    };
    std::vector<double> x(x0.begin(), x0.end()), w(w0, w0 + weight.count());
    // The surrogate at the base point is the quantized forward.
    double forward = 0.0;
    for (int k = 0; k < rows * out; ++k) forward += double(dout[k]) * y[k];
    EXPECT_NEAR(surrogate(x, w), forward, 1e-3 * std::max(1.0, std::fabs(forward)));

    const double h = 1e-4;
    for (size_t i = 0; i < x.size(); i += 7) {
        std::vector<double> plus = x, minus = x;
        plus[i] += h;
        minus[i] -= h;
        const double numeric = (surrogate(plus, w) - surrogate(minus, w)) / (2 * h);
        EXPECT_NEAR(din[i], numeric, 1e-4 + 1e-4 * std::fabs(numeric)) << "dx[" << i << "]";
    }
    for (size_t i = 0; i < w.size(); i += 11) {
        std::vector<double> plus = w, minus = w;
        plus[i] += h;
        minus[i] -= h;
        const double numeric = (surrogate(x, plus) - surrogate(x, minus)) / (2 * h);
        EXPECT_NEAR(dw[i], numeric, 1e-4 + 1e-4 * std::fabs(numeric)) << "dW[" << i << "]";
    }
}

// A dqt model stores no fp32 copy of a quantized weight: with the embedding and the head
// quantized too, the weights category holds exactly the codes, the scales and the norm
// gains, and a forward/backward pass leaves it unchanged (dequantized tiles are scratch).
TEST(DqtStorage, WeightsCategoryIsTheCodesOnly) {
    for (const int bits : {1, 8}) {
        MethodConfig method = dqt_method(bits);
        method.quantize_embedding = true;
        method.quantize_head = true;
        const ModelConfig config = small_config();
        const int64_t weights_before = memory_live_bytes(MemCategory::weights);
        ModelParameters model(config, method);
        initialize_parameters(model, 3);
        size_t code_bytes_expected = 0, norm_floats = 0;
        for (const ParamTensor& tensor : model.layout.tensors) {
            if (tensor.is_matrix()) {
                EXPECT_EQ(tensor.format, bits == 1 ? WeightFormat::ternary_codes : WeightFormat::int_codes) << tensor.name;
                code_bytes_expected += code_bytes(method.grid, tensor.count());
            } else {
                EXPECT_EQ(tensor.format, WeightFormat::f32) << tensor.name;
                norm_floats += tensor.count();
            }
        }
        // Padding to 64 bytes per tensor is the only slack.
        const size_t tensors = model.layout.tensors.size();
        EXPECT_GE(model.layout.code_total, code_bytes_expected);
        EXPECT_LT(model.layout.code_total, code_bytes_expected + 64 * tensors);
        EXPECT_GE(model.layout.value_total, norm_floats);
        EXPECT_LT(model.layout.value_total, norm_floats + 16 * tensors);
        const int64_t weights = memory_live_bytes(MemCategory::weights) - weights_before;
        EXPECT_EQ(weights, static_cast<int64_t>(model.codes.bytes() + model.values.bytes() + model.scales.bytes()));
        if (bits == 1) {
            EXPECT_LT(weights, config.parameter_count() / 2);  // far below 4 bytes per weight
        }

        Activations acts(config, 2, config.seq_len);
        for (size_t i = 0; i < acts.tokens.size(); ++i) {
            acts.tokens[i] = static_cast<int32_t>(i % config.vocab_size);
            acts.targets[i] = static_cast<int32_t>((i + 1) % config.vocab_size);
        }
        memory_reset_peaks();
        GradientBuffer gradients(model.layout);
        model_forward(model, acts, true);
        model_backward(model, acts, 1.0f, gradients);
        EXPECT_EQ(memory_peak_bytes(MemCategory::weights) - weights_before, weights);
        EXPECT_EQ(memory_live_bytes(MemCategory::weights) - weights_before, weights);
    }
}

// What the forward reads: dqt weights are exactly q / s; bitnet's are the ternary
// projection of the latent weights; fp's are the weights themselves.
TEST(WeightAccess, DenseWeightIsWhatEachMethodDefines) {
    const ModelConfig config = small_config();
    MethodConfig bitnet;
    bitnet.kind = Method::bitnet;
    for (const MethodConfig& method : {MethodConfig{}, bitnet, dqt_method(1), dqt_method(5)}) {
        ModelParameters model(config, method);
        initialize_parameters(model, 11);
        const ParamTensor& tensor = *model.tensors.layers[0].wq;
        const DenseWeight dense(model, tensor);
        std::vector<float> expected(tensor.count());
        if (method.kind == Method::bitnet) {
            absmean_ternarize(expected.data(), model.value(tensor), tensor.count());
        } else if (method.kind == Method::dqt) {
            for (size_t i = 0; i < tensor.count(); ++i)
                expected[i] = read_code(model.code(tensor), method.grid, i) / model.scale(tensor);
        } else {
            expected.assign(model.value(tensor), model.value(tensor) + tensor.count());
        }
        for (size_t i = 0; i < tensor.count(); ++i) ASSERT_EQ(dense.data()[i], expected[i]) << method.label();
    }
}

// Ternary conversion: a bitnet model converts to codes that compute its own forward; a dqt
// n-bit model's quantized weights become clip(round(W / (mean|W| + eps)), -1, 1) * mean|W|.
TEST(TernaryConvert, BitnetKeepsItsForwardAndDqtFollowsTheFormula) {
    const ModelConfig config = small_config();
    MethodConfig bitnet;
    bitnet.kind = Method::bitnet;
    {
        ModelParameters model(config, bitnet);
        initialize_parameters(model, 21);
        const auto converted = convert_to_ternary(model);
        EXPECT_EQ(converted->method.kind, Method::dqt);
        EXPECT_TRUE(converted->method.grid.ternary());
        Activations a(config, 2, config.seq_len), b(config, 2, config.seq_len);
        for (size_t i = 0; i < a.tokens.size(); ++i) a.tokens[i] = b.tokens[i] = static_cast<int32_t>(i * 7 % 13);
        model_forward(model, a, false);
        model_forward(*converted, b, false);
        for (size_t i = 0; i < a.logits.size(); ++i) ASSERT_NEAR(a.logits[i], b.logits[i], 1e-4f) << i;
    }
    {
        ModelParameters model(config, dqt_method(8));
        initialize_parameters(model, 22);
        const auto converted = convert_to_ternary(model);
        const ParamTensor& tensor = *model.tensors.layers[0].w_down;
        std::vector<float> w(tensor.count()), expected(tensor.count());
        model.read_dense(tensor, w.data());
        absmean_ternarize(expected.data(), w.data(), w.size());
        const DenseWeight dense(*converted, *converted->tensors.layers[0].w_down);
        for (size_t i = 0; i < w.size(); ++i) ASSERT_NEAR(dense.data()[i], expected[i], 1e-6f * std::fabs(expected[i]));
        // fp32 tensors (norms, embedding, head) are copied as they are.
        const ParamTensor& head = *model.tensors.output;
        EXPECT_EQ(0, std::memcmp(model.value(head), converted->value(*converted->tensors.output),
                                 head.count() * sizeof(float)));
    }
    ModelParameters fp(config);
    EXPECT_THROW(convert_to_ternary(fp), Error);
}

// TWN: q = sign(W) where |W| > 0.7 mean|W|, alpha = the mean |W| there, against a direct
// float64 computation on an 8-bit model's weights.
TEST(TernaryConvert, TwnRuleFollowsItsDefinition) {
    ModelParameters model(small_config(), dqt_method(8));
    initialize_parameters(model, 23);
    const auto converted = convert_to_ternary(model, TernaryRule::twn);
    for (const ParamTensor& tensor : converted->layout.tensors) {
        if (!tensor.stores_codes()) continue;
        std::vector<float> w(tensor.count());
        model.read_dense(model.layout.tensors[static_cast<size_t>(tensor.tensor_id)], w.data());
        double mean = 0.0;
        for (float v : w) mean += std::fabs(v);
        mean /= static_cast<double>(w.size());
        double kept = 0.0, kept_sum = 0.0;
        for (size_t i = 0; i < w.size(); ++i) {
            const bool above = std::fabs(w[i]) > 0.7 * mean;
            ASSERT_EQ(read_code(converted->code(tensor), converted->method.grid, i), above ? (w[i] > 0 ? 1 : -1) : 0);
            kept += above;
            kept_sum += above ? std::fabs(w[i]) : 0.0;
        }
        EXPECT_NEAR(1.0 / converted->scale(tensor), kept_sum / kept, 1e-6 * kept_sum / kept) << tensor.name;
    }
    EXPECT_EQ(parse_ternary_rule("twn"), TernaryRule::twn);
    EXPECT_THROW(parse_ternary_rule("median"), Error);
}

// The learned scale's gradient sum_i g_i q_i is exact: any split into pieces (fused update
// pieces, data-parallel shards) gives the same bits, within 2^-40 per term of float64.
// The learned scale's gradient is summed inside the update, whose blocks run on several
// threads: with 1 and 2 threads (a tensor of many parallel chunks, fp32 and 8-bit moments) the
// sum equals the standalone one and the codes are the same. A shared sum that threads added to
// without a lock lost updates here (2-thread runs of the default dqt recipe differed from
// 1-thread ones); TSan runs this test.
TEST(DqtUpdate, LearnedScaleGradientIsExactWithOneAndTwoThreads) {
    const uint64_t seed = dqt::testing::test_seed();
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937 rng(seed);
    const CodeGrid grid{1};
    const size_t count = 64 * 4096;
    std::uniform_int_distribution<int> pick(grid.qn(), grid.qp());
    std::normal_distribution<float> gradient(0.0f, 1e-3f);
    std::vector<uint8_t> initial(code_bytes(grid, count));
    std::vector<float> g(count);
    for (size_t i = 0; i < count; ++i) {
        write_code(initial.data(), grid, i, pick(rng));
        g[i] = gradient(rng);
    }
    const ExactSum reference = code_gradient_dot(g.data(), initial.data(), grid, 0, count);
    const DqtRounding rounding{Rounding::stochastic, 7, ScaleRule::learned};
    for (const StateDtype dtype : {StateDtype::fp32, StateDtype::q8}) {
        std::vector<uint8_t> codes_after[2];
        for (int threads = 1; threads <= 2; ++threads) {
            std::vector<uint8_t> codes = initial;
            float scale = 30.0f;
            TensorMoments moments(0, count, dtype);
            const DqtStep step(CodedTensor{codes.data(), &scale, count, grid, 3}, AdamWConfig{}, 1e-3f, 1, rounding);
            ExactSum dot = 0;
            omp_set_num_threads(threads);
            step.apply(g.data(), moments, 0, count, &dot);
            omp_set_num_threads(2);
            EXPECT_TRUE(dot == reference) << threads << " threads, " << state_dtype_bits(dtype) << "-bit state";
            codes_after[threads - 1] = codes;
        }
        EXPECT_EQ(codes_after[0], codes_after[1]);
    }
}

TEST(ScaleGradient, CodeGradientDotIsTheSameForAnySplit) {
    const uint64_t seed = dqt::testing::test_seed();
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937 rng(seed);
    for (const int bits : {1, 8}) {
        const CodeGrid grid{bits};
        const size_t count = 5000;
        std::uniform_int_distribution<int> pick(grid.qn(), grid.qp());
        std::lognormal_distribution<float> magnitude(-8.0f, 2.0f);  // gradients over many decades, below the clamp
        std::vector<uint8_t> codes(code_bytes(grid, count));
        std::vector<float> g(count);
        double reference = 0.0;
        for (size_t i = 0; i < count; ++i) {
            const int q = pick(rng);
            write_code(codes.data(), grid, i, q);
            g[i] = (rng() % 2 ? 1.0f : -1.0f) * magnitude(rng);
            reference += static_cast<double>(g[i]) * q;
        }
        const ExactSum whole = code_gradient_dot(g.data(), codes.data(), grid, 0, count);
        EXPECT_NEAR(exact_sum_value(whole), reference, count * std::ldexp(1.0, -kExactSumFractionBits));
        for (int trial = 0; trial < 20; ++trial) {
            std::vector<size_t> cuts = {0, count};
            for (int k = 0; k < 5; ++k) cuts.push_back(4 * (rng() % (count / 4)));  // whole packed bytes
            std::sort(cuts.begin(), cuts.end());
            ExactSum pieces = 0;
            for (size_t k = 0; k + 1 < cuts.size(); ++k) {
                pieces += code_gradient_dot(g.data() + cuts[k], codes.data(), grid, cuts[k], cuts[k + 1]);
            }
            ASSERT_TRUE(pieces == whole) << "cuts differ at trial " << trial;
        }
    }
    // Terms beyond the clamp and NaN do not overflow or poison the sum.
    const std::vector<float> wild = {1e30f, -1e30f, std::nanf(""), 2.0f};
    std::vector<uint8_t> ones(code_bytes(CodeGrid{8}, 4));
    for (size_t i = 0; i < 4; ++i) write_code(ones.data(), CodeGrid{8}, i, 1);
    EXPECT_EQ(exact_sum_value(code_gradient_dot(wild.data(), ones.data(), CodeGrid{8}, 0, 4)), 2.0);
}
