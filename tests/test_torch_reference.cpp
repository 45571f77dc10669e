// dqt's training step against an independent implementation: scripts/torch_reference.py
// computes a tiny LLaMA's logits, loss and every gradient in PyTorch (float64), for fp and for
// bitnet, each with its own head and with the head tied to the embedding table, from the weights and batch it stores beside them in tests/golden/. Here dqt runs the
// same step in fp32 from the same weights and batch and must agree.
//
// Tolerances: dqt computes in fp32 (unit roundoff 6e-8) with sums over at most a few hundred
// terms, in another order than PyTorch, so each value carries a relative error of about
// 1e-6 of the largest terms it sums; a tensor may differ from the reference by 2e-5 of its
// largest magnitude (20x that), the loss by 1e-6 relative. bitnet rounds weights and
// activations: the script chose a batch whose every rounded value lies at least 1e-5 (relative)
// from a rounding boundary, so both sides round every value alike and the same bounds hold.
// A wrong convention (RoPE pairs, head grouping, SubLN placement, a missing straight-through
// path, a scale off by one) moves values by far more than this: each was checked to fail.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "io/safetensors.h"
#include "model/llama.h"
#include "gradient_buffer.h"

using namespace dqt;

namespace {

const std::string kReference = std::string(DQT_SOURCE_DIR) + "/tests/golden/torch_reference.safetensors";
constexpr double kTensorTolerance = 2e-5;  // of the tensor's largest magnitude
constexpr double kLossTolerance = 1e-6;    // relative

// max |actual - expected| / max |expected| over a tensor.
double relative_error(const float* actual, const std::vector<float>& expected) {
    double worst = 0.0, largest = 0.0;
    for (size_t i = 0; i < expected.size(); ++i) {
        worst = std::max(worst, std::fabs(static_cast<double>(actual[i]) - expected[i]));
        largest = std::max(largest, std::fabs(static_cast<double>(expected[i])));
    }
    return largest > 0.0 ? worst / largest : worst;
}

// tied: the head reads the embedding table, whose gradient then sums the head's and the lookup's.
void check_step_against_reference(const std::string& method_name, bool tied) {
    const SafetensorsReader reference(kReference);
    ModelConfig config = nlohmann::json::parse(reference.metadata().at("config")).get<ModelConfig>();
    config.tie_embeddings = tied;
    const std::string results = method_name + (tied ? ".tied" : "");
    const int batch = std::stoi(reference.metadata().at("batch"));
    MethodConfig method;
    method.kind = parse_method(method_name);
    ModelParameters model(config, method);
    for (const ParamTensor& tensor : model.layout.tensors) {
        const std::vector<float> values = reference.read_f32("weight." + tensor.name);
        ASSERT_EQ(values.size(), tensor.count()) << tensor.name;
        std::copy(values.begin(), values.end(), model.value(tensor));
    }
    Activations acts(config, batch, config.seq_len);
    const std::vector<int32_t> tokens = reference.read_i32("tokens"), targets = reference.read_i32("targets");
    ASSERT_EQ(tokens.size(), acts.tokens.size());
    std::copy(tokens.begin(), tokens.end(), acts.tokens.data());
    std::copy(targets.begin(), targets.end(), acts.targets.data());
    const int N = batch * config.seq_len;

    const double loss = model_forward(model, acts, true) / N;  // model_forward sums over tokens
    const double expected_loss = reference.read_f32(results + ".loss")[0];
    EXPECT_NEAR(loss, expected_loss, kLossTolerance * expected_loss);
    EXPECT_LE(relative_error(acts.logits.data(), reference.read_f32(results + ".logits")), kTensorTolerance);

    GradientBuffer gradients(model.layout);
    model_backward(model, acts, 1.0f / static_cast<float>(N), gradients);
    for (const ParamTensor& tensor : model.layout.tensors) {
        const std::vector<float> expected = reference.read_f32(results + ".grad." + tensor.name);
        ASSERT_EQ(expected.size(), tensor.count()) << tensor.name;
        EXPECT_LE(relative_error(gradients.of(tensor), expected), kTensorTolerance) << "gradient of " << tensor.name;
    }
}

}  // namespace

TEST(TorchReference, FpStepMatchesPyTorch) { check_step_against_reference("fp", false); }

TEST(TorchReference, BitnetStepMatchesPyTorch) { check_step_against_reference("bitnet", false); }

TEST(TorchReference, TiedFpStepMatchesPyTorch) { check_step_against_reference("fp", true); }

TEST(TorchReference, TiedBitnetStepMatchesPyTorch) { check_step_against_reference("bitnet", true); }
