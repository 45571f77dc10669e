// The optimizer: AdamW with fp32, bf16 and 8-bit state against float64 references, the
// schedule, and gradient norms.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "model/initialization.h"
#include "optim/optimizer.h"
#include "core/error.h"
#include "optim/schedule.h"
#include "quant/bf16.h"
#include "quant/dynamic8.h"
#include "test_helpers.h"
#include "gradient_buffer.h"

using namespace dqt;

namespace {

ModelConfig tiny_config() {
    ModelConfig config;
    config.dim = 8;
    config.n_layers = 1;
    config.n_heads = 2;
    config.n_kv_heads = 2;
    config.ffn_dim = 12;
    config.vocab_size = 5;
    return config;
}

// Float64 copy of a model's fp32 values, laid out like the gradients.
std::vector<double> values_of(const ModelParameters& model) {
    std::vector<double> w(model.layout.total, 0.0);
    for (const ParamTensor& tensor : model.layout.tensors)
        for (size_t i = 0; i < tensor.count(); ++i) w[tensor.flat_offset + i] = model.value(tensor)[i];
    return w;
}

// Reference of the 8-bit block-wise state: each block of kStateBlock values scaled by its
// absmax and replaced by the nearest map entry (linear scan), in float64 otherwise.
void quantize_dequantize_reference(double* x, size_t count, const DynamicMap& map) {
    for (size_t first = 0; first < count; first += kStateBlock) {
        const size_t n = std::min(kStateBlock, count - first);
        double absmax = 0.0;
        for (size_t i = 0; i < n; ++i) absmax = std::max(absmax, std::fabs(x[first + i]));
        const float absmax_f = static_cast<float>(absmax);
        for (size_t i = 0; i < n; ++i) {
            const float normalized = absmax_f > 0 ? static_cast<float>(x[first + i]) * (1.0f / absmax_f) : 0.0f;
            x[first + i] = static_cast<double>(map.values[nearest_code_reference(normalized, map)]) * absmax_f;
        }
    }
}

}  // namespace

// fp32 and bf16 state: five steps of optimizer_step equal adamw_reference (float64, the
// bf16 case with its moments rounded to bf16 after every step).
TEST(Optim, AdamWMatchesFloat64ReferenceOverSeveralSteps) {
    for (const StateDtype dtype : {StateDtype::fp32, StateDtype::bf16}) {
        ModelParameters model(tiny_config());
        const uint64_t seed = dqt::testing::test_seed();
        SCOPED_TRACE("seed " + std::to_string(seed) + " state " + state_dtype_bits(dtype));
        initialize_parameters(model, seed);
        OptimizerState state(model.layout, dtype);
        GradientBuffer gradients(model.layout);
        AdamWConfig adam;
        adam.weight_decay = 0.1f;
        const size_t total = model.layout.total;
        std::vector<double> w = values_of(model), m(total, 0.0), v(total, 0.0), g(total);
        std::mt19937 rng(seed);
        std::normal_distribution<float> normal(0.0f, 0.01f);
        for (int t = 1; t <= 5; ++t) {
            for (const ParamTensor& tensor : model.layout.tensors)
                for (size_t i = 0; i < tensor.count(); ++i) g[tensor.flat_offset + i] = gradients.of(tensor)[i] = normal(rng);
            const float lr = 1e-2f * t;
            optimizer_step(model, gradients, state, adam, lr, t, seed);
            for (const ParamTensor& tensor : model.layout.tensors) {
                const size_t o = tensor.flat_offset;
                adamw_reference(w.data() + o, m.data() + o, v.data() + o, g.data() + o, tensor.count(),
                                tensor.is_matrix(), adam, lr, t);
                if (dtype == StateDtype::bf16) {
                    for (size_t i = o; i < o + tensor.count(); ++i) {
                        m[i] = round_to_bf16(static_cast<float>(m[i]));
                        v[i] = round_to_bf16(static_cast<float>(v[i]));
                    }
                }
            }
        }
        // fp32: float rounding only. bf16: a moment computed in float may round to the other
        // neighbouring bf16 value than the float64 one (1 part in 256 of one step's update).
        const double tolerance = dtype == StateDtype::fp32 ? 1e-5 : 2e-4;
        for (const ParamTensor& tensor : model.layout.tensors) {
            for (size_t i = 0; i < tensor.count(); ++i) {
                const double expected = w[tensor.flat_offset + i];
                ASSERT_NEAR(model.value(tensor)[i], expected, tolerance * std::max(1.0, std::fabs(expected)))
                    << tensor.name << "[" << i << "]";
            }
        }
    }
}

// 8-bit state, one step from zero: the weights follow the float64 step (the moments enter the
// update before they are stored), and the stored codes are the block-wise quantization of m
// and of sqrt(v).
TEST(Optim, EightBitStateStepMatchesFloat64ReferenceWithQuantizedMoments) {
    const uint64_t seed = dqt::testing::test_seed();
    SCOPED_TRACE("seed " + std::to_string(seed));
    const size_t count = 3 * kStateBlock + 77;  // ragged last block
    TensorMoments moments(0, count, StateDtype::q8);
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> w(count), g(count);
    for (size_t i = 0; i < count; ++i) {
        w[i] = 0.02f * normal(rng);
        g[i] = 0.01f * normal(rng) * (i % 50 == 0 ? 100.0f : 1.0f);  // outliers set some blocks' absmax
    }
    AdamWConfig config;
    const float lr = 1e-3f;
    std::vector<double> w_ref(w.begin(), w.end()), m(count), v(count);
    for (size_t i = 0; i < count; ++i) {
        m[i] = (1.0 - config.beta1) * g[i];
        v[i] = (1.0 - config.beta2) * static_cast<double>(g[i]) * g[i];
    }
    const AdamWStep step(config, lr, 1, true);
    step.apply(w.data(), g.data(), moments, 0, count);

    // The reference: the float64 step uses unquantized moments; the stored moments are their quantization.
    const double bias1 = 1.0 - config.beta1, bias2 = 1.0 - config.beta2;
    for (size_t i = 0; i < count; ++i) {
        w_ref[i] -= lr * config.weight_decay * w_ref[i];
        w_ref[i] -= lr * (m[i] / bias1) / (std::sqrt(v[i] / bias2) + config.eps);
    }
    for (size_t i = 0; i < count; ++i) ASSERT_NEAR(w[i], w_ref[i], 1e-6) << i;
    std::vector<double> m_q = m, v_q(count);
    quantize_dequantize_reference(m_q.data(), count, dynamic_map_signed());
    for (size_t i = 0; i < count; ++i) v_q[i] = std::sqrt(v[i]);  // stored as sqrt(v)
    quantize_dequantize_reference(v_q.data(), count, dynamic_map_unsigned());
    std::vector<float> m_stored(count), v_stored(count);
    for (size_t block = 0; block < moments.blocks(); ++block) {
        const size_t first = block * kStateBlock, n = std::min(kStateBlock, count - first);
        dequantize_block8(m_stored.data() + first, moments.m.as<uint8_t>() + first, n, moments.m_absmax[block],
                          dynamic_map_signed());
        dequantize_block8(v_stored.data() + first, moments.v.as<uint8_t>() + first, n, moments.v_absmax[block],
                          dynamic_map_unsigned());
    }
    for (size_t i = 0; i < count; ++i) {
        ASSERT_NEAR(m_stored[i], m_q[i], 1e-6 * std::fabs(m_q[i]) + 1e-12) << "m " << i;
        ASSERT_NEAR(v_stored[i], v_q[i], 1e-6 * std::fabs(v_q[i]) + 1e-12) << "sqrt(v) " << i;
    }
}

// 8-bit state over twenty steps stays close to the float64 optimizer: the weights' total
// movement differs by a few percent at most (relative L2), the price of 8-bit moments. The
// gradients of a block span two decades, so small entries of v are exercised.
TEST(Optim, EightBitStateTracksFloat64AdamW) {
    const uint64_t seed = dqt::testing::test_seed();
    SCOPED_TRACE("seed " + std::to_string(seed));
    const size_t count = 8 * kStateBlock;
    TensorMoments moments(0, count, StateDtype::q8);
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> w(count), g(count), direction(count);
    for (size_t i = 0; i < count; ++i) {
        w[i] = 0.02f * normal(rng);
        direction[i] = normal(rng);  // a persistent gradient component, as in training
    }
    std::vector<double> w0(w.begin(), w.end()), w_ref = w0, m(count, 0.0), v(count, 0.0), g_ref(count);
    AdamWConfig config;
    for (int t = 1; t <= 20; ++t) {
        for (size_t i = 0; i < count; ++i) {
            const float magnitude = std::pow(10.0f, -2.0f * static_cast<float>(i % 97) / 96.0f);
            g_ref[i] = g[i] = 0.01f * magnitude * (direction[i] + 0.5f * normal(rng));
        }
        AdamWStep(config, 1e-3f, t, true).apply(w.data(), g.data(), moments, 0, count);
        adamw_reference(w_ref.data(), m.data(), v.data(), g_ref.data(), count, true, config, 1e-3, t);
    }
    double moved = 0.0, error = 0.0;
    for (size_t i = 0; i < count; ++i) {
        moved += (w_ref[i] - w0[i]) * (w_ref[i] - w0[i]);
        error += (w[i] - w_ref[i]) * (w[i] - w_ref[i]);
    }
    EXPECT_LT(std::sqrt(error / moved), 0.05);  // about 0.03 measured
}

TEST(Optim, StateKeepsSmallTensorsInFp32AndSaysSo) {
    ModelConfig config = tiny_config();
    config.dim = 64;
    config.ffn_dim = 128;
    const ModelParameters model(config);
    const OptimizerState state(model.layout, StateDtype::q8);
    for (const ParamTensor& tensor : model.layout.tensors) {
        EXPECT_EQ(state.of(tensor).dtype, tensor.count() < kSmallTensor ? StateDtype::fp32 : StateDtype::q8)
            << tensor.name;
    }
    const std::string description = state.describe(model.layout);
    EXPECT_NE(description.find("8-bit block-wise"), std::string::npos) << description;
    EXPECT_NE(description.find("fp32 for"), std::string::npos) << description;
    EXPECT_THROW(parse_state_dtype("4"), Error);
}

TEST(Optim, ScheduleWarmsUpThenDecaysToFloor) {
    const LrSchedule schedule{1e-3f, 10, 110, 0.1f};
    EXPECT_FLOAT_EQ(schedule.at(0), 1e-4f);
    EXPECT_FLOAT_EQ(schedule.at(9), 1e-3f);
    EXPECT_FLOAT_EQ(schedule.at(10), 1e-3f);
    EXPECT_NEAR(schedule.at(60), 0.55e-3f, 1e-9);
    EXPECT_NEAR(schedule.at(110), 1e-4f, 1e-9);
    for (int step = 10; step < 110; ++step) EXPECT_GE(schedule.at(step), schedule.at(step + 1));
}

TEST(Optim, GlobalNormAndScaling) {
    const ModelParameters model(tiny_config());
    GradientBuffer gradients(model.layout);
    double expected = 0.0;
    for (const ParamTensor& tensor : model.layout.tensors) {
        for (size_t i = 0; i < tensor.count(); ++i) {
            const float value = 0.001f * static_cast<float>((tensor.flat_offset + i) % 17);
            gradients.of(tensor)[i] = value;
            expected += static_cast<double>(value) * value;
        }
    }
    EXPECT_NEAR(gradients.global_norm(), std::sqrt(expected), 1e-9);
    gradients.scale(0.5f);
    EXPECT_NEAR(gradients.global_norm(), 0.5 * std::sqrt(expected), 1e-9);
}
