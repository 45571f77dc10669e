#include "infer/inference_model.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "core/error.h"
#include "kernels/float16_widen.h"
#include "model/tensor_source.h"
#include "model/weight_access.h"
#include "quant/codes.h"

namespace dqt {

namespace {

// Live parameters as a TensorSource: fp32 tensors copied, or borrowed (then never narrowed to
// fp16: evaluation during training shares the run's values).
class ParametersSource : public TensorSource {
public:
    ParametersSource(const ModelParameters& model, WeightSource weights) : model_(model), weights_(weights) {}
    const ModelConfig& config() const override { return model_.config; }
    const MethodConfig& method() const override { return model_.method; }
    const ModelTensors& tensors() const override { return model_.tensors; }
    void read_values(const ParamTensor& t, float* out) const override {
        std::memcpy(out, model_.value(t), t.count() * sizeof(float));
    }
    const float* values_in_place(const ParamTensor& t) const override {
        return weights_ == WeightSource::borrow ? model_.value(t) : nullptr;
    }
    IntegerScales read_integers(const ParamTensor& t, int8_t* q) const override {
        const IntegerScales scales{t.traits().weight_scale(model_.stored(t), t), model_.scale(t)};
        t.traits().read_integers(model_.stored(t), t, scales.weight_scale, 0, t.count(), q);
        return scales;
    }

private:
    const ModelParameters& model_;
    WeightSource weights_;
};

// An fp tensor's values: where the source keeps them, or read into `owned`.
const float* fp32_values(const TensorSource& source, const ParamTensor& tensor, Array<float>& owned) {
    if (const float* in_place = source.values_in_place(tensor)) return in_place;
    owned = Array<float>(MemCategory::weights, tensor.count());
    source.read_values(tensor, owned.data());
    return owned.data();
}

// An fp weight matrix: borrowed where the source keeps it (never narrowed then), else read once,
// as fp16 where exact.
void read_float_matrix(const TensorSource& source, const ParamTensor& tensor, const float*& dense,
                       Array<float>& owned_dense, Array<Float16>& halves) {
    dense = source.values_in_place(tensor);
    if (dense) return;
    FloatWeights read = source.read_float_weights(tensor);
    halves = std::move(read.halves);
    owned_dense = std::move(read.values);
    dense = owned_dense.size() > 0 ? owned_dense.data() : nullptr;
}

InferenceLinear make_linear(const TensorSource& source, const ParamTensor& tensor) {
    InferenceLinear linear;
    linear.rows = tensor.rows;
    linear.cols = tensor.cols;
    if (!tensor.quantized()) {
        read_float_matrix(source, tensor, linear.dense, linear.owned_dense, linear.owned_halves);
        if (linear.owned_halves.size() > 0) {
            linear.format = LinearFormat::half;
            linear.halves = linear.owned_halves.data();
        }
        return linear;
    }
    if (tensor.traits().ternary_integers) {
        linear.format = LinearFormat::ternary;
        if (source.read_ternary_packed(tensor, linear.ternary)) return linear;
    }
    std::vector<int8_t> q(tensor.count());
    const float weight_scale = source.read_integers(tensor, q.data()).weight_scale;
    if (tensor.traits().ternary_integers) {
        linear.ternary = pack_ternary(q.data(), tensor.rows, tensor.cols, weight_scale);
    } else {
        linear.format = LinearFormat::int8;
        linear.int8 = pack_int8(q.data(), tensor.rows, tensor.cols, weight_scale);
    }
    return linear;
}

InferenceEmbedding make_embedding(const TensorSource& source, const ParamTensor& tensor) {
    InferenceEmbedding embedding;
    embedding.rows = tensor.rows;
    embedding.cols = tensor.cols;
    if (tensor.format == WeightFormat::f32) {
        read_float_matrix(source, tensor, embedding.dense, embedding.owned_dense, embedding.halves);
        return embedding;
    }
    embedding.codes = Array<int8_t>(MemCategory::weights, tensor.count());
    embedding.code_scale = source.read_integers(tensor, embedding.codes.data()).code_scale;
    return embedding;
}

}  // namespace

size_t InferenceLinear::weight_bytes() const {
    switch (format) {
        case LinearFormat::dense: return static_cast<size_t>(rows) * cols * sizeof(float);
        case LinearFormat::half: return static_cast<size_t>(rows) * cols * sizeof(Float16);
        case LinearFormat::ternary: return ternary.packed.bytes();
        case LinearFormat::ternary_lookup: return lookup.packed.bytes();
        case LinearFormat::int8: return int8.values.bytes();
    }
    return 0;
}

void InferenceEmbedding::lookup(const int32_t* tokens, int count, float* out) const {
#pragma omp parallel for schedule(static) if (count > 1)
    for (int i = 0; i < count; ++i) {
        const size_t row = static_cast<size_t>(tokens[i]) * cols;
        float* out_row = out + static_cast<size_t>(i) * cols;
        if (dense != nullptr) {
            std::memcpy(out_row, dense + row, static_cast<size_t>(cols) * sizeof(float));
        } else if (halves.size() > 0) {
            widen_f16(halves.data() + row, out_row, static_cast<size_t>(cols));
        } else {
            for (int j = 0; j < cols; ++j) out_row[j] = static_cast<float>(codes[row + j]) / code_scale;
        }
    }
}

InferenceModel::InferenceModel(const ModelParameters& source, WeightSource fp32_tensors)
    : InferenceModel(ParametersSource(source, fp32_tensors)) {}

InferenceModel::InferenceModel(const TensorSource& source)
    : config(source.config()), method_label(source.method().label()) {
    const ModelTensors& t = source.tensors();
    auto norm = [&](const ParamTensor* tensor) -> const float* {
        if (tensor == nullptr) return nullptr;
        owned_norms_.emplace_back();
        return fp32_values(source, *tensor, owned_norms_.back());
    };
    embedding = make_embedding(source, *t.token_embd);
    for (const LayerTensors& p : t.layers) {
        InferenceLayer layer;
        layer.attn_norm = norm(p.attn_norm);
        layer.wq = make_linear(source, *p.wq);
        layer.wk = make_linear(source, *p.wk);
        layer.wv = make_linear(source, *p.wv);
        layer.attn_subnorm = norm(p.attn_subnorm);
        layer.wo = make_linear(source, *p.wo);
        layer.ffn_norm = norm(p.ffn_norm);
        layer.w_gate = make_linear(source, *p.w_gate);
        layer.w_up = make_linear(source, *p.w_up);
        layer.ffn_subnorm = norm(p.ffn_subnorm);
        layer.w_down = make_linear(source, *p.w_down);
        layers.push_back(std::move(layer));
    }
    output_norm = norm(t.output_norm);
    if (t.output == t.token_embd && !t.output->quantized()) {
        head.rows = embedding.rows;  // tied fp32 or fp16: the head reads the embedding table itself
        head.cols = embedding.cols;
        head.dense = embedding.dense;
        if (embedding.dense == nullptr) {
            head.format = LinearFormat::half;
            head.halves = embedding.halves.data();
        }
    } else {
        head = make_linear(source, *t.output);
    }
}

size_t InferenceModel::weight_bytes_per_token() const {
    const size_t C = static_cast<size_t>(config.dim), F = static_cast<size_t>(config.ffn_dim);
    const size_t norm_floats_per_layer = 2 * C + (config.subln ? C + F : 0);
    const size_t embedding_element = embedding.dense != nullptr ? sizeof(float) : embedding.halves.size() > 0 ? 2 : 1;
    size_t bytes = static_cast<size_t>(embedding.cols) * embedding_element;
    for (const InferenceLayer& layer : layers) {
        for (const InferenceLinear* linear :
             {&layer.wq, &layer.wk, &layer.wv, &layer.wo, &layer.w_gate, &layer.w_up, &layer.w_down})
            bytes += linear->weight_bytes();
        bytes += norm_floats_per_layer * sizeof(float);
    }
    return bytes + C * sizeof(float) + head.weight_bytes();
}

std::string InferenceModel::kernels_label() const {
    bool ternary = false, lookup = false, int8 = false;
    for (const InferenceLayer& layer : layers) {
        for (const InferenceLinear* linear : {&layer.wq, &layer.w_down}) {
            ternary |= linear->format == LinearFormat::ternary;
            lookup |= linear->format == LinearFormat::ternary_lookup;
            int8 |= linear->format == LinearFormat::int8;
        }
    }
    ternary |= head.format == LinearFormat::ternary;
    lookup |= head.format == LinearFormat::ternary_lookup;
    int8 |= head.format == LinearFormat::int8;
    std::string label;
    if (ternary) label = std::string("ternary ") + integer_isa_name(best_integer_isa());
    if (lookup) label = std::string("ternary lookup ") + integer_isa_name(best_integer_isa());
    if (int8) label += std::string(label.empty() ? "" : ", ") + "int8 " + integer_isa_name(best_integer_isa());
    return label.empty() ? "none" : label;
}

}  // namespace dqt
