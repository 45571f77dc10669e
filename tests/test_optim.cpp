#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "optim/optimizer.h"
#include "optim/schedule.h"

using namespace dqt;

TEST(Optim, AdamWMatchesFloat64ReferenceOverSeveralSteps) {
    ModelConfig config;
    config.dim = 8;
    config.n_layers = 1;
    config.n_heads = 2;
    config.n_kv_heads = 2;
    config.ffn_dim = 12;
    config.vocab_size = 5;
    ModelParameters model(config);
    const uint64_t seed = std::random_device{}();
    SCOPED_TRACE("seed " + std::to_string(seed));
    model.initialize(seed);
    OptimizerState state(model.layout.total, StateDtype::fp32);
    AdamWConfig adam;
    adam.weight_decay = 0.1f;

    const size_t total = model.layout.total;  // fp: values laid out like the gradients
    ASSERT_EQ(model.layout.value_total, total);
    std::vector<double> w(model.values.begin(), model.values.end()), m(total, 0.0), v(total, 0.0), g(total);
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal(0.0f, 0.01f);
    for (int t = 1; t <= 5; ++t) {
        for (size_t i = 0; i < total; ++i) model.gradients[i] = normal(rng);
        for (size_t i = 0; i < total; ++i) g[i] = model.gradients[i];
        const float lr = 1e-2f * t;
        optimizer_step(model, state, adam, lr, t, seed);
        for (const ParamTensor& tensor : model.layout.tensors) {
            adamw_reference(w.data() + tensor.offset, m.data() + tensor.offset, v.data() + tensor.offset,
                            g.data() + tensor.offset, tensor.count(), tensor.is_matrix(), adam, lr, t);
        }
    }
    for (const ParamTensor& tensor : model.layout.tensors) {
        for (size_t i = 0; i < tensor.count(); ++i) {
            const size_t k = tensor.offset + i;
            ASSERT_NEAR(model.value(tensor)[i], w[k], 1e-5 * std::max(1.0, std::fabs(w[k]))) << tensor.name << "[" << i << "]";
        }
    }
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
    ModelConfig config;
    config.dim = 8;
    config.n_layers = 1;
    config.n_heads = 2;
    config.n_kv_heads = 2;
    config.ffn_dim = 12;
    config.vocab_size = 5;
    ModelParameters model(config);
    double expected = 0.0;
    for (const ParamTensor& tensor : model.layout.tensors) {
        for (size_t i = 0; i < tensor.count(); ++i) {
            const float value = 0.001f * static_cast<float>((tensor.offset + i) % 17);
            model.gradients[tensor.offset + i] = value;
            expected += static_cast<double>(value) * value;
        }
    }
    EXPECT_NEAR(gradient_global_norm(model), std::sqrt(expected), 1e-9);
    scale_gradients(model, 0.5f);
    EXPECT_NEAR(gradient_global_norm(model), 0.5 * std::sqrt(expected), 1e-9);
}
