// The weight-format table (model/weight_format.h): which format each tensor takes, and that
// every format's reads agree with a per-element reference written here on fresh random
// weights: the forward's dense weight, its integer form times the weight scale, the stored
// values, and the stored bytes the layout reserves.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "core/error.h"
#include "model/parameters.h"
#include "model/weight_format.h"
#include "quant/codes.h"

using namespace dqt;

namespace {

ModelConfig small_config() {
    ModelConfig c;
    c.dim = 16;
    c.n_layers = 1;
    c.n_heads = 2;
    c.n_kv_heads = 1;
    c.ffn_dim = 24;
    c.vocab_size = 12;
    c.seq_len = 8;
    c.tie_embeddings = false;
    return c;
}

MethodConfig method_of(Method kind, int bits = 1) {
    MethodConfig m;
    m.kind = kind;
    m.grid = CodeGrid{bits};
    if (kind == Method::dqt) m.quantize_embedding = true;
    if (kind != Method::fp) m.quantize_head = true;
    return m;
}

// The element a tensor's forward reads, from first principles (docs/METHOD.md section 2).
std::vector<double> reference_forward(const ModelParameters& model, const ParamTensor& t) {
    std::vector<double> w(t.count());
    switch (t.format) {
        case WeightFormat::f32:
            for (size_t i = 0; i < w.size(); ++i) w[i] = model.value(t)[i];
            break;
        case WeightFormat::ternary_latent: {
            double sum = 0;
            for (size_t i = 0; i < w.size(); ++i) sum += std::fabs(model.value(t)[i]);
            const double gamma = sum / static_cast<double>(w.size());
            for (size_t i = 0; i < w.size(); ++i) {
                const double q = std::nearbyint(model.value(t)[i] / (gamma + 1e-5));
                w[i] = std::clamp(q, -1.0, 1.0) * gamma;
            }
            break;
        }
        case WeightFormat::ternary_codes:
        case WeightFormat::int_codes:
            for (size_t i = 0; i < w.size(); ++i)
                w[i] = read_code(model.code(t), model.method.grid, i) / static_cast<double>(model.scale(t));
            break;
    }
    return w;
}

// Random values for fp32-stored tensors and random codes and scales for coded ones (a seeded
// draw unlike the model's initialisation, which snaps every code from one normal draw).
void randomize(ModelParameters& model, std::mt19937& rng) {
    std::normal_distribution<float> normal(0.0f, 0.05f);
    for (const ParamTensor& t : model.layout.tensors) {
        if (!t.stores_codes()) {
            for (size_t i = 0; i < t.count(); ++i) model.value(t)[i] = normal(rng);
            continue;
        }
        const CodeGrid& grid = model.method.grid;
        std::uniform_int_distribution<int> code(grid.qn(), grid.qp());
        for (size_t i = 0; i < t.count(); ++i) write_code(model.code(t), grid, i, code(rng));
        model.scale(t) = std::uniform_real_distribution<float>(0.5f, 40.0f)(rng);
    }
}

}  // namespace

TEST(WeightFormat, EachRoleTakesTheFormatItsMethodGives) {
    const MethodConfig fp = method_of(Method::fp), bitnet = method_of(Method::bitnet);
    const MethodConfig ternary = method_of(Method::dqt, 1), four_bit = method_of(Method::dqt, 4);
    EXPECT_EQ(weight_format_of(TensorRole::block_linear, fp), WeightFormat::f32);
    EXPECT_EQ(weight_format_of(TensorRole::block_linear, bitnet), WeightFormat::ternary_latent);
    EXPECT_EQ(weight_format_of(TensorRole::block_linear, ternary), WeightFormat::ternary_codes);
    EXPECT_EQ(weight_format_of(TensorRole::block_linear, four_bit), WeightFormat::int_codes);
    EXPECT_EQ(weight_format_of(TensorRole::head, bitnet), WeightFormat::ternary_latent);
    EXPECT_EQ(weight_format_of(TensorRole::embedding, ternary), WeightFormat::ternary_codes);
    for (const MethodConfig& m : {fp, bitnet, ternary, four_bit}) {
        EXPECT_EQ(weight_format_of(TensorRole::norm, m), WeightFormat::f32);
    }
    MethodConfig unquantized_ends = ternary;
    unquantized_ends.quantize_embedding = unquantized_ends.quantize_head = false;
    EXPECT_EQ(weight_format_of(TensorRole::embedding, unquantized_ends), WeightFormat::f32);
    EXPECT_EQ(weight_format_of(TensorRole::head, unquantized_ends), WeightFormat::f32);
}

TEST(WeightFormat, ReadsAgreeWithThePerElementReference) {
    std::mt19937 rng(20261125);
    for (const MethodConfig& method : {method_of(Method::fp), method_of(Method::bitnet), method_of(Method::dqt, 1),
                                       method_of(Method::dqt, 3), method_of(Method::dqt, 8)}) {
        ModelParameters model(small_config(), method);
        randomize(model, rng);
        for (const ParamTensor& t : model.layout.tensors) {
            SCOPED_TRACE(method.label() + " " + t.name + " " + t.traits().name);
            const WeightFormatTraits& traits = t.traits();
            const std::vector<double> expected = reference_forward(model, t);
            // Rows [row_begin, rows): a read that starts inside the tensor, on a whole byte.
            const int row_begin = t.rows > 1 ? std::uniform_int_distribution<int>(1, t.rows - 1)(rng) : 0;
            const size_t first = static_cast<size_t>(row_begin) * t.cols, count = t.count() - first;
            std::vector<float> forward(count);
            traits.read_forward(model.stored(t), t, first, count, forward.data());
            for (size_t i = 0; i < count; ++i) {
                ASSERT_NEAR(forward[i], expected[first + i], 1e-6 * std::fabs(expected[first + i])) << "element " << i;
            }
            std::vector<float> stored(t.count());
            model.read_dense(t, stored.data());
            for (size_t i = 0; i < t.count(); ++i) {
                const double as_stored = t.format == WeightFormat::ternary_latent ? model.value(t)[i] : expected[i];
                ASSERT_NEAR(stored[i], as_stored, 1e-6 * std::fabs(as_stored)) << "element " << i;
            }
            if (!traits.quantized) {
                EXPECT_THROW(traits.weight_scale(model.stored(t), t), Error);
                continue;
            }
            const float weight_scale = traits.weight_scale(model.stored(t), t);
            std::vector<int8_t> q(count);
            traits.read_integers(model.stored(t), t, weight_scale, first, count, q.data());
            for (size_t i = 0; i < count; ++i) {
                if (traits.ternary_integers) {
                    ASSERT_LE(std::abs(q[i]), 1);
                }
                const double w = q[i] * static_cast<double>(weight_scale);
                ASSERT_NEAR(w, expected[first + i], 1e-6 * std::fabs(expected[first + i])) << "element " << i;
            }
        }
    }
}

TEST(WeightFormat, TheLayoutReservesTheStoredBytes) {
    for (const MethodConfig& method : {method_of(Method::bitnet), method_of(Method::dqt, 1), method_of(Method::dqt, 5)}) {
        const ParamLayout layout = make_param_layout(small_config(), method);
        for (size_t k = 0; k + 1 < layout.tensors.size(); ++k) {
            const ParamTensor& t = layout.tensors[k];
            SCOPED_TRACE(method.label() + " " + t.name);
            if (t.stores_codes()) {
                EXPECT_EQ(t.traits().stored_bytes(t.count()), code_bytes(method.grid, t.count()));
                // The next coded tensor starts after this one's bytes.
                for (size_t n = k + 1; n < layout.tensors.size(); ++n) {
                    if (!layout.tensors[n].stores_codes()) continue;
                    EXPECT_GE(layout.tensors[n].code_offset, t.code_offset + t.traits().stored_bytes(t.count()));
                    break;
                }
            } else {
                EXPECT_EQ(t.traits().stored_bytes(t.count()), t.count() * sizeof(float));
            }
        }
    }
}
