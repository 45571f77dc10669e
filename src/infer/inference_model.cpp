#include "infer/inference_model.h"

#include <algorithm>
#include <cstring>
#include <iterator>

#include "core/error.h"
#include "kernels/float16_widen.h"
#include "model/weight_access.h"
#include "quant/codes.h"

namespace dqt {

namespace {

// The fp32 values of a tensor, borrowed from the source or copied into `owned`.
const float* fp32_values(const ModelParameters& source, const ParamTensor& tensor, WeightSource weights,
                         Array<float>& owned) {
    if (weights == WeightSource::borrow) return source.value(tensor);
    owned = Array<float>(MemCategory::weights, tensor.count());
    std::memcpy(owned.data(), source.value(tensor), tensor.count() * sizeof(float));
    return owned.data();
}

// The tensor's values as fp16 where every one is an fp16 exactly and they are copied anyway;
// empty otherwise.
Array<Float16> exact_halves(const ModelParameters& source, const ParamTensor& tensor, WeightSource weights) {
    if (weights == WeightSource::borrow) return {};
    const float* values = source.value(tensor);
    // Trained fp32 weights fail within their first values: try those before allocating.
    Float16 probe[256];
    if (!narrow_f16_exactly(values, probe, std::min<size_t>(std::size(probe), tensor.count()))) return {};
    Array<Float16> halves(MemCategory::weights, tensor.count());
    if (!narrow_f16_exactly(values, halves.data(), tensor.count())) return {};
    return halves;
}

InferenceLinear make_linear(const ModelParameters& source, const ParamTensor& tensor, WeightSource weights) {
    InferenceLinear linear;
    linear.rows = tensor.rows;
    linear.cols = tensor.cols;
    if (!tensor.quantized()) {
        linear.owned_halves = exact_halves(source, tensor, weights);
        if (linear.owned_halves.size() > 0) {
            linear.format = LinearFormat::half;
            linear.halves = linear.owned_halves.data();
        } else {
            linear.dense = fp32_values(source, tensor, weights, linear.owned_dense);
        }
        return linear;
    }
    std::vector<int8_t> q(tensor.count());
    const float weight_scale = quantized_weight_scale(source, tensor);
    read_quantized_codes(source, tensor, weight_scale, 0, tensor.rows, q.data());
    if (tensor.traits().ternary_integers) {
        linear.format = LinearFormat::ternary;
        linear.ternary = pack_ternary(q.data(), tensor.rows, tensor.cols, weight_scale);
    } else {
        linear.format = LinearFormat::int8;
        linear.int8 = pack_int8(q.data(), tensor.rows, tensor.cols, weight_scale);
    }
    return linear;
}

InferenceEmbedding make_embedding(const ModelParameters& source, const ParamTensor& tensor, WeightSource weights) {
    InferenceEmbedding embedding;
    embedding.rows = tensor.rows;
    embedding.cols = tensor.cols;
    if (tensor.format == WeightFormat::f32) {
        embedding.halves = exact_halves(source, tensor, weights);
        if (embedding.halves.size() == 0) embedding.dense = fp32_values(source, tensor, weights, embedding.owned_dense);
        return embedding;
    }
    embedding.codes = Array<int8_t>(MemCategory::weights, tensor.count());
    tensor.traits().read_integers(source, tensor, quantized_weight_scale(source, tensor), 0, tensor.count(),
                                  embedding.codes.data());
    embedding.code_scale = source.scale(tensor);
    return embedding;
}

}  // namespace

size_t InferenceLinear::weight_bytes() const {
    switch (format) {
        case LinearFormat::dense: return static_cast<size_t>(rows) * cols * sizeof(float);
        case LinearFormat::half: return static_cast<size_t>(rows) * cols * sizeof(Float16);
        case LinearFormat::ternary: return ternary.packed.bytes();
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
    : config(source.config), method_label(source.method.label()) {
    const ModelTensors& t = source.tensors;
    auto norm = [&](const ParamTensor* tensor) -> const float* {
        if (tensor == nullptr) return nullptr;
        owned_norms_.emplace_back();
        return fp32_values(source, *tensor, fp32_tensors, owned_norms_.back());
    };
    embedding = make_embedding(source, *t.token_embd, fp32_tensors);
    for (const LayerTensors& p : t.layers) {
        InferenceLayer layer;
        layer.attn_norm = norm(p.attn_norm);
        layer.wq = make_linear(source, *p.wq, fp32_tensors);
        layer.wk = make_linear(source, *p.wk, fp32_tensors);
        layer.wv = make_linear(source, *p.wv, fp32_tensors);
        layer.attn_subnorm = norm(p.attn_subnorm);
        layer.wo = make_linear(source, *p.wo, fp32_tensors);
        layer.ffn_norm = norm(p.ffn_norm);
        layer.w_gate = make_linear(source, *p.w_gate, fp32_tensors);
        layer.w_up = make_linear(source, *p.w_up, fp32_tensors);
        layer.ffn_subnorm = norm(p.ffn_subnorm);
        layer.w_down = make_linear(source, *p.w_down, fp32_tensors);
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
        head = make_linear(source, *t.output, fp32_tensors);
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
    bool ternary = false, int8 = false;
    for (const InferenceLayer& layer : layers) {
        for (const InferenceLinear* linear : {&layer.wq, &layer.w_down}) {
            ternary |= linear->format == LinearFormat::ternary;
            int8 |= linear->format == LinearFormat::int8;
        }
    }
    ternary |= head.format == LinearFormat::ternary;
    int8 |= head.format == LinearFormat::int8;
    std::string label;
    if (ternary) label = std::string("ternary ") + integer_isa_name(best_integer_isa());
    if (int8) label += std::string(label.empty() ? "" : ", ") + "int8 " + integer_isa_name(best_integer_isa());
    return label.empty() ? "none" : label;
}

}  // namespace dqt
