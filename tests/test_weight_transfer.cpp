// transfer_weights (dqt train --init-from): each target format against a per-element
// reference computed here from the source's real values, on seeded random models.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "model/initialization.h"
#include "model/llama.h"
#include "model/ternary_convert.h"
#include "model/weight_transfer.h"
#include "quant/codes.h"
#include "test_helpers.h"

using namespace dqt;
using namespace dqt::testing;

namespace {

ModelConfig transfer_config() {
    ModelConfig c;
    c.dim = 16;
    c.n_layers = 2;
    c.n_heads = 2;
    c.n_kv_heads = 1;
    c.ffn_dim = 24;
    c.vocab_size = 13;
    c.seq_len = 8;
    return c;
}

MethodConfig method_of(Method kind, int bits = 1) {
    MethodConfig m;
    m.kind = kind;
    m.grid = CodeGrid{bits};
    return m;
}

std::vector<float> stored(const ModelParameters& model, const ParamTensor& tensor) {
    std::vector<float> out(tensor.count());
    tensor.traits().read_stored(model.stored(tensor), tensor, 0, tensor.count(), out.data());
    return out;
}

std::vector<int> integers(const ModelParameters& model, const ParamTensor& tensor) {
    std::vector<int> q(tensor.count());
    for (size_t i = 0; i < q.size(); ++i) q[i] = read_code(model.code(tensor), model.method.grid, i);
    return q;
}

}  // namespace

// fp32 targets (fp, bitnet's latents, the unquantized ends) take the source's real values
// exactly: an fp model's values, a dqt model's q / s.
TEST(WeightTransfer, RealValuedTargetsTakeTheSourceValues) {
    const ModelConfig config = transfer_config();
    for (const MethodConfig& from : {method_of(Method::fp), method_of(Method::dqt, 8), method_of(Method::dqt, 1)}) {
        ModelParameters source(config, from);
        initialize_parameters(source, test_seed());
        for (const MethodConfig& to : {method_of(Method::fp), method_of(Method::bitnet)}) {
            ModelParameters target(config, to);
            transfer_weights(source, target);
            for (const ParamTensor& tensor : target.layout.tensors) {
                const std::vector<float> expected = stored(source, source.layout.tensors[tensor.tensor_id]);
                ASSERT_EQ(0, std::memcmp(expected.data(), target.value(tensor), expected.size() * sizeof(float)))
                    << tensor.name << " from " << from.label() << " to " << to.label() << seed_trace(test_seed());
            }
        }
    }
}

// n-bit targets: s = min(qp / max W, qn / min W), q = round-half-even(W s), checked in float64
// against the source's values (an fp model's, so the codes are not already on a grid).
TEST(WeightTransfer, IntegerCodesFollowTheAbsmaxRule) {
    const ModelConfig config = transfer_config();
    ModelParameters source(config, method_of(Method::fp));
    initialize_parameters(source, test_seed());
    for (int bits : {2, 4, 8}) {
        ModelParameters target(config, method_of(Method::dqt, bits));
        transfer_weights(source, target);
        for (const ParamTensor& tensor : target.layout.tensors) {
            if (!tensor.stores_codes()) continue;
            const std::vector<float> w = stored(source, source.layout.tensors[tensor.tensor_id]);
            double largest = 0.0, smallest = 0.0;
            for (float v : w) {
                largest = std::max(largest, static_cast<double>(v));
                smallest = std::min(smallest, static_cast<double>(v));
            }
            const CodeGrid& grid = target.method.grid;
            const float scale = static_cast<float>(std::min(grid.qp() / largest, grid.qn() / smallest));
            ASSERT_FLOAT_EQ(target.scale(tensor), scale) << tensor.name;
            const std::vector<int> q = integers(target, tensor);
            for (size_t i = 0; i < w.size(); ++i) {
                const double x = static_cast<double>(w[i]) * target.scale(tensor);
                ASSERT_LE(std::fabs(q[i] - x), 0.5 + 1e-6) << tensor.name << "[" << i << "], " << bits << " bits";
                ASSERT_TRUE(q[i] >= grid.qn() && q[i] <= grid.qp()) << tensor.name;
            }
        }
    }
}

// A dqt model carried to its own width keeps its codes and scale once both extreme codes are
// in use (the absmax rule then finds the same step, to float rounding).
TEST(WeightTransfer, SameWidthKeepsCodesWhenTheTopCodeIsUsed) {
    const ModelConfig config = transfer_config();
    ModelParameters source(config, method_of(Method::dqt, 8));
    initialize_parameters(source, test_seed());
    for (const ParamTensor& tensor : source.layout.tensors) {
        if (!tensor.stores_codes()) continue;
        write_code(source.code(tensor), source.method.grid, 3, source.method.grid.qp());
        write_code(source.code(tensor), source.method.grid, 4, source.method.grid.qn());
    }
    ModelParameters target(config, method_of(Method::dqt, 8));
    transfer_weights(source, target);
    for (const ParamTensor& tensor : target.layout.tensors) {
        if (!tensor.stores_codes()) continue;
        EXPECT_EQ(integers(source, tensor), integers(target, tensor)) << tensor.name;
        EXPECT_FLOAT_EQ(source.scale(tensor), target.scale(tensor)) << tensor.name;  // qp / (qp / s): a rounding apart
    }
}

// Ternary targets: from a bitnet model its own absmean rule, so the new model's forward is the
// bitnet model's; from any other the TWN rule, the codes convert_to_ternary(twn) gives.
TEST(WeightTransfer, TernaryTargetsUseBitnetsRuleOrTwn) {
    const ModelConfig config = transfer_config();
    ModelParameters bitnet(config, method_of(Method::bitnet));
    initialize_parameters(bitnet, test_seed());
    ModelParameters from_bitnet(config, method_of(Method::dqt, 1));
    transfer_weights(bitnet, from_bitnet);
    Activations a(config, 2, config.seq_len), b(config, 2, config.seq_len);
    for (size_t i = 0; i < a.tokens.size(); ++i) a.tokens[i] = b.tokens[i] = static_cast<int32_t>(i * 5 % 13);
    model_forward(bitnet, a, false);
    model_forward(from_bitnet, b, false);
    for (size_t i = 0; i < a.logits.size(); ++i) ASSERT_NEAR(a.logits[i], b.logits[i], 1e-4f) << i;

    ModelParameters eight(config, method_of(Method::dqt, 8));
    initialize_parameters(eight, test_seed() + 1);
    ModelParameters from_eight(config, method_of(Method::dqt, 1));
    transfer_weights(eight, from_eight);
    const auto twn = convert_to_ternary(eight, TernaryRule::twn);
    for (const ParamTensor& tensor : from_eight.layout.tensors) {
        if (!tensor.stores_codes()) continue;
        EXPECT_EQ(integers(*twn, tensor), integers(from_eight, tensor)) << tensor.name;
        EXPECT_EQ(twn->scale(tensor), from_eight.scale(tensor)) << tensor.name;
    }
}

TEST(WeightTransfer, RefusesAnotherShape) {
    const ModelConfig config = transfer_config();
    ModelConfig wider = config;
    wider.ffn_dim = 32;
    ModelConfig deeper = config;
    deeper.n_layers = 3;
    ModelParameters source(config, method_of(Method::fp));
    ModelParameters other_width(wider, method_of(Method::dqt, 1));
    ModelParameters other_depth(deeper, method_of(Method::fp));
    EXPECT_THROW(transfer_weights(source, other_width), Error);
    EXPECT_THROW(transfer_weights(source, other_depth), Error);
}
