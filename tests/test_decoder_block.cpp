// The decoder block as data (model/decoder_block.h): the list every executor walks is a
// well-formed data flow, and uses each of a layer's weights once in the role it has.
#include <gtest/gtest.h>

#include <set>

#include "model/decoder_block.h"
#include "model/parameters.h"

namespace dqt {
namespace {

ModelConfig block_config(bool subln) {
    ModelConfig config;
    config.subln = subln;
    return config;
}

int weight_count(const BlockStep& step) {
    switch (step.op) {
        case BlockOp::attention: return 3;
        case BlockOp::gated_linears: return 2;
        default: return 1;
    }
}

TEST(DecoderBlock, EveryStepReadsValuesWrittenBeforeItAndWritesANewOneThatIsRead) {
    for (const bool subln : {true, false}) {
        SCOPED_TRACE(subln ? "SubLN" : "no SubLN");
        const std::vector<BlockStep> steps = decoder_block_steps(block_config(subln));
        std::set<BlockValue> written = {BlockValue::input};
        for (const BlockStep& step : steps) {
            EXPECT_TRUE(written.count(step.in)) << "a step reads a value no earlier step wrote";
            EXPECT_FALSE(written.count(step.out)) << "a value is written twice";
            if (step.op == BlockOp::residual_linear) {
                EXPECT_TRUE(written.count(step.residual));
                EXPECT_TRUE(on_residual_stream(step.residual));
                EXPECT_TRUE(on_residual_stream(step.out));
            } else {
                EXPECT_FALSE(on_residual_stream(step.out)) << "only a residual step writes the stream";
            }
            written.insert(step.out);
        }
        ASSERT_FALSE(steps.empty());
        EXPECT_EQ(steps.back().out, BlockValue::output);
        for (size_t i = 0; i + 1 < steps.size(); ++i) {
            bool read_later = false;
            for (size_t j = i + 1; j < steps.size(); ++j)
                read_later = read_later || steps[j].in == steps[i].out || steps[j].residual == steps[i].out;
            EXPECT_TRUE(read_later) << "step " << i << " writes a value no later step reads";
        }
        EXPECT_EQ(written.count(BlockValue::att_sub), subln ? 1u : 0u);
        EXPECT_EQ(written.count(BlockValue::h_sub), subln ? 1u : 0u);
    }
}

TEST(DecoderBlock, UsesEachOfALayersWeightsOnceInItsRole) {
    for (const bool subln : {true, false}) {
        SCOPED_TRACE(subln ? "SubLN" : "no SubLN");
        const ModelConfig config = block_config(subln);
        const ModelParameters model(config, MethodConfig{});
        const LayerTensors& layer = model.tensors.layers[0];
        std::multiset<const ParamTensor*> used;
        for (const BlockStep& step : decoder_block_steps(config)) {
            for (int i = 0; i < weight_count(step); ++i) {
                const BlockWeight role = step.weights[static_cast<size_t>(i)];
                const ParamTensor* tensor =
                    step.op == BlockOp::rmsnorm ? layer_gain(layer, role) : layer_linear(layer, role);
                ASSERT_NE(tensor, nullptr);
                used.insert(tensor);
                // A norm's gain is a vector; every product's weight a matrix reading its input's columns.
                if (step.op == BlockOp::rmsnorm) {
                    EXPECT_EQ(tensor->rows, 1);
                    EXPECT_EQ(tensor->cols, block_value_cols(step.in, config));
                } else {
                    EXPECT_EQ(tensor->cols, block_value_cols(step.in, config));
                }
            }
            if (step.op == BlockOp::residual_linear) {
                EXPECT_EQ(layer_linear(layer, step.weights[0])->rows, block_value_cols(step.out, config));
            }
        }
        const size_t expected = subln ? 11 : 9;  // 4 or 2 gains, 7 linears
        EXPECT_EQ(used.size(), expected);
        EXPECT_EQ(std::set<const ParamTensor*>(used.begin(), used.end()).size(), expected) << "a weight used twice";
        EXPECT_THROW(layer_gain(layer, BlockWeight::wq), Error);
        EXPECT_THROW(layer_linear(layer, BlockWeight::attn_norm), Error);
    }
}

}  // namespace
}  // namespace dqt
