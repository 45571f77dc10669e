// Whole-model checks: gradients of the full LLaMA forward/backward against finite
// differences, and thread-count independence.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <random>
#include <tuple>
#include <vector>

#include "core/rng.h"
#include "model/initialization.h"
#include "model/llama.h"
#include "test_helpers.h"
#include "gradient_buffer.h"

using namespace dqt;

namespace {

ModelConfig tiny_config(bool subln, int kv_heads) {
    ModelConfig c;
    c.dim = 16;
    c.n_layers = 2;
    c.n_heads = 4;
    c.n_kv_heads = kv_heads;
    c.ffn_dim = 24;
    c.vocab_size = 11;
    c.seq_len = 6;
    c.subln = subln;
    c.init_std = 0.3f;  // large weights: gradients well above float rounding noise
    return c;
}

void fill_tokens(Activations& acts, int vocab, uint64_t seed) {
    for (size_t i = 0; i < acts.tokens.size(); ++i) {
        acts.tokens[i] = static_cast<int32_t>(random_u64(seed, kStreamBatch, 0, i) % vocab);
        acts.targets[i] = static_cast<int32_t>(random_u64(seed, kStreamBatch, 1, i) % vocab);
    }
}

}  // namespace

// For every tensor, the directional derivative along a random unit direction (touching only
// that tensor) from central differences must match the backward pass's gradient dotted with
// the direction. The loss is the summed cross-entropy (grad_scale 1), in float32, so eps and
// tolerance are chosen for float rounding: relative 2e-2 or absolute 2e-3.
// With tied embeddings the table's gradient sums its two uses (lookup and head). Both FFN
// gates: SwiGLU and ReLU^2-GLU.
class ModelGradient : public ::testing::TestWithParam<std::tuple<bool, int, bool, GatedActivation>> {};

TEST_P(ModelGradient, MatchesFiniteDifferencesForEveryTensor) {
    const auto [subln, kv_heads, tied, activation] = GetParam();
    ModelConfig config = tiny_config(subln, kv_heads);
    config.tie_embeddings = tied;
    config.ffn_activation = activation;
    ModelParameters model(config);
    const uint64_t seed = dqt::testing::test_seed();
    SCOPED_TRACE("seed " + std::to_string(seed));
    initialize_parameters(model, seed);
    // Norm gains away from 1 so their gradients are exercised generically.
    for (const ParamTensor& tensor : model.layout.tensors) {
        if (tensor.is_matrix()) continue;
        for (size_t i = 0; i < tensor.count(); ++i)
            model.value(tensor)[i] = 1.0f + 0.3f * normal01(seed, 9, tensor.tensor_id, i);
    }
    Activations acts(config, 2, config.seq_len);
    fill_tokens(acts, config.vocab_size, seed);

    GradientBuffer gradients(model.layout);
    model_forward(model, acts, true);
    model_backward(model, acts, 1.0f, gradients);

    const float eps = 1e-2f;
    for (const ParamTensor& tensor : model.layout.tensors) {
        std::vector<float> direction(tensor.count());
        double norm = 0.0;
        for (size_t i = 0; i < direction.size(); ++i) {
            direction[i] = normal01(seed, 11, tensor.tensor_id, i);
            norm += direction[i] * direction[i];
        }
        double analytic = 0.0;
        for (size_t i = 0; i < direction.size(); ++i) {
            direction[i] /= static_cast<float>(std::sqrt(norm));
            analytic += static_cast<double>(gradients.of(tensor)[i]) * direction[i];
        }
        std::vector<float> saved(model.value(tensor), model.value(tensor) + tensor.count());
        auto loss_at = [&](float step) {
            for (size_t i = 0; i < saved.size(); ++i) model.value(tensor)[i] = saved[i] + step * direction[i];
            return model_forward(model, acts, true);
        };
        // Richardson extrapolation of two central differences cancels their h^2 error term,
        // which the SubLN gains' curvature makes visible at h = 1e-2.
        const double coarse = (loss_at(eps) - loss_at(-eps)) / (2.0 * eps);
        const double fine = (loss_at(eps / 2) - loss_at(-eps / 2)) / eps;
        const double numeric = (4.0 * fine - coarse) / 3.0;
        loss_at(0.0f);
        EXPECT_NEAR(analytic, numeric, std::max(2e-3, 2e-2 * std::fabs(numeric))) << "tensor " << tensor.name;
    }
}

INSTANTIATE_TEST_SUITE_P(Variants, ModelGradient,
                         ::testing::Values(std::make_tuple(true, 4, false, GatedActivation::silu),
                                           std::make_tuple(false, 4, false, GatedActivation::silu),
                                           std::make_tuple(true, 2, false, GatedActivation::silu),
                                           std::make_tuple(true, 4, true, GatedActivation::silu),
                                           std::make_tuple(true, 2, false, GatedActivation::relu2),
                                           std::make_tuple(false, 4, true, GatedActivation::relu2)));

TEST(Model, GradientsIdenticalForOneAndTwoThreads) {
    ModelConfig config = tiny_config(true, 2);
    config.dim = 64;
    config.ffn_dim = 96;
    config.seq_len = 32;
    config.vocab_size = 50;
    config.init_std = 0.02f;
    std::vector<float> gradients[2];
    double losses[2];
    for (int run = 0; run < 2; ++run) {
        omp_set_num_threads(run + 1);
        ModelParameters model(config);
        initialize_parameters(model, 5);
        Activations acts(config, 3, config.seq_len);
        fill_tokens(acts, config.vocab_size, 5);
        GradientBuffer buffer(model.layout);
        losses[run] = model_forward(model, acts, true);
        model_backward(model, acts, 1.0f / 96, buffer);
        gradients[run].assign(buffer.values().begin(), buffer.values().end());
    }
    omp_set_num_threads(2);
    EXPECT_EQ(losses[0], losses[1]);
    ASSERT_EQ(gradients[0].size(), gradients[1].size());
    EXPECT_EQ(0, std::memcmp(gradients[0].data(), gradients[1].data(), gradients[0].size() * sizeof(float)));
}

TEST(Model, ParameterCountMatchesLayout) {
    for (const auto& [subln, tied] : {std::pair{true, false}, std::pair{false, false}, std::pair{true, true}}) {
        ModelConfig config = tiny_config(subln, 2);
        config.tie_embeddings = tied;
        const ModelParameters model(config);
        EXPECT_EQ(model.tensors.output == model.tensors.token_embd, tied);
        size_t counted = 0;
        for (const ParamTensor& tensor : model.layout.tensors) counted += tensor.count();
        EXPECT_EQ(static_cast<int64_t>(counted), config.parameter_count());
    }
}
