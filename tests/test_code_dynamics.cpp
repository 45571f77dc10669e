// The code-movement diagnostic (train/code_dynamics.h): what it reports against codes changed
// by hand, for dqt's stored codes and bitnet's absmean codes.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "model/initialization.h"
#include "model/parameters.h"
#include "quant/codes.h"
#include "train/code_dynamics.h"

using namespace dqt;

namespace {

ModelConfig tiny_config() {
    ModelConfig c;
    c.dim = 32;
    c.n_layers = 1;
    c.n_heads = 2;
    c.n_kv_heads = 2;
    c.ffn_dim = 64;
    c.vocab_size = 17;
    c.seq_len = 8;
    return c;
}

MethodConfig method_of(Method method) {
    MethodConfig m;
    m.kind = method;
    m.grid.bits = 1;
    m.validate();
    return m;
}

const ParamTensor& layout_tensor(const ModelParameters& model, const std::string& name) {
    for (const ParamTensor& tensor : model.layout.tensors)
        if (tensor.name == name) return tensor;
    throw Error("no tensor " + name + " in the layout");
}

const nlohmann::json& tensor_named(const nlohmann::json& record, const std::string& name) {
    for (const nlohmann::json& tensor : record["tensors"])
        if (tensor["name"] == name) return tensor;
    throw Error("no tensor " + name + " in the record");
}

}  // namespace

// Measured every 4 steps: the snapshot of step 3 is compared at step 4; codes changed between
// them count in step 4's "in step" fraction, and everything since step 0 in "since".
TEST(CodeDynamics, CountsTheCodesThatChangedInTheStepAndSinceTheLastMeasurement) {
    ModelParameters model(tiny_config(), method_of(Method::dqt));
    initialize_parameters(model, 7);
    const ParamTensor& wq = layout_tensor(model, "blk.0.attn_q");
    ASSERT_TRUE(wq.quantized());
    const CodeGrid grid = model.method.grid;
    auto flip = [&](size_t first, size_t count) {
        for (size_t i = first; i < first + count; ++i)
            write_code(model.code(wq), grid, i, read_code(model.code(wq), grid, i) == 1 ? -1 : 1);
    };
    CodeDynamics dynamics(model, 4);
    nlohmann::json record;
    flip(0, 8);  // during steps 1..3: counts since step 0, not in step 4
    for (int step = 1; step <= 3; ++step) EXPECT_FALSE(dynamics.after_step(model, step, record));
    flip(100, 16);  // during step 4
    ASSERT_TRUE(dynamics.after_step(model, 4, record));
    const double n = static_cast<double>(wq.count());
    EXPECT_EQ(record["step"], 4);
    EXPECT_EQ(record["since_step"], 0);
    const nlohmann::json& measured = tensor_named(record, wq.name);
    EXPECT_DOUBLE_EQ(measured["changed_in_step"].get<double>(), 16 / n);
    EXPECT_DOUBLE_EQ(measured["changed_since"].get<double>(), 24 / n);
    EXPECT_EQ(measured["grid_step"].get<double>(), static_cast<double>(1.0f / model.scale(wq)));
    // Other tensors did not move; the whole-model fractions weigh tensors by their size.
    const nlohmann::json& untouched = tensor_named(record, "blk.0.attn_k");
    EXPECT_EQ(untouched["changed_since"].get<double>(), 0.0);
    double quantized_weights = 0;
    for (const ParamTensor& t : model.layout.tensors) quantized_weights += t.quantized() ? t.count() : 0;
    EXPECT_DOUBLE_EQ(record["changed_since"].get<double>(), 24 / quantized_weights);
    // The next measurement counts from step 4.
    for (int step = 5; step <= 7; ++step) EXPECT_FALSE(dynamics.after_step(model, step, record));
    ASSERT_TRUE(dynamics.after_step(model, 8, record));
    EXPECT_EQ(record["since_step"], 4);
    EXPECT_EQ(record["changed_since"].get<double>(), 0.0);
}

// bitnet's codes are those of its latent weights: moving one latent across a rounding
// threshold changes one code.
TEST(CodeDynamics, MeasuresBitnetOnTheCodesItsForwardMultiplies) {
    ModelParameters model(tiny_config(), method_of(Method::bitnet));
    initialize_parameters(model, 7);
    const ParamTensor& wq = layout_tensor(model, "blk.0.attn_q");
    ASSERT_TRUE(wq.quantized());
    CodeDynamics dynamics(model, 2);
    nlohmann::json record;
    EXPECT_FALSE(dynamics.after_step(model, 1, record));
    float* w = model.value(wq);
    w[5] = w[5] > 0 ? -1.0f : 1.0f;  // far past either threshold, opposite sign: code +-1 -> -+1
    ASSERT_TRUE(dynamics.after_step(model, 2, record));
    const double changed = tensor_named(record, wq.name)["changed_in_step"].get<double>();
    // One code changed; the tensor's mean |W| (its scale) moved too, which may move a few more.
    EXPECT_GE(changed, 1.0 / static_cast<double>(wq.count()));
    EXPECT_LT(changed, 0.05);
}

TEST(CodeDynamics, AnFpModelOrANonPositiveIntervalIsAnError) {
    ModelParameters fp(tiny_config(), method_of(Method::fp));
    EXPECT_THROW(CodeDynamics(fp, 4), Error);
    ModelParameters dqt_model(tiny_config(), method_of(Method::dqt));
    EXPECT_THROW(CodeDynamics(dqt_model, 0), Error);
}
