#include "model/parameters.h"

#include <cstring>

#include "core/error.h"
#include "core/rng.h"

namespace dqt {

const ParamTensor& ParamLayout::find(const std::string& name) const {
    for (const ParamTensor& tensor : tensors) {
        if (tensor.name == name) return tensor;
    }
    throw Error("no parameter named " + name);
}

ParamLayout make_param_layout(const ModelConfig& c) {
    ParamLayout layout;
    auto add = [&](const std::string& name, int rows, int cols, bool is_matrix) {
        ParamTensor tensor;
        tensor.name = name;
        tensor.rows = rows;
        tensor.cols = cols;
        tensor.offset = layout.total;
        tensor.is_matrix = is_matrix;
        tensor.tensor_id = static_cast<int>(layout.tensors.size());
        // Keep every tensor 64-byte aligned inside the flat array.
        layout.total += (tensor.count() + 15) / 16 * 16;
        layout.tensors.push_back(tensor);
    };
    add("token_embd", c.vocab_size, c.dim, true);
    for (int l = 0; l < c.n_layers; ++l) {
        const std::string prefix = "blk." + std::to_string(l) + ".";
        add(prefix + "attn_norm", 1, c.dim, false);
        add(prefix + "attn_q", c.dim, c.dim, true);
        add(prefix + "attn_k", c.kv_dim(), c.dim, true);
        add(prefix + "attn_v", c.kv_dim(), c.dim, true);
        if (c.subln) add(prefix + "attn_sub_norm", 1, c.dim, false);
        add(prefix + "attn_output", c.dim, c.dim, true);
        add(prefix + "ffn_norm", 1, c.dim, false);
        add(prefix + "ffn_gate", c.ffn_dim, c.dim, true);
        add(prefix + "ffn_up", c.ffn_dim, c.dim, true);
        if (c.subln) add(prefix + "ffn_sub_norm", 1, c.ffn_dim, false);
        add(prefix + "ffn_down", c.dim, c.ffn_dim, true);
    }
    add("output_norm", 1, c.dim, false);
    add("output", c.vocab_size, c.dim, true);
    return layout;
}

ModelTensors bind_tensors(const ModelConfig& c, const ParamLayout& layout, float* base) {
    auto at = [&](const std::string& name) { return base + layout.find(name).offset; };
    ModelTensors t;
    t.token_embd = at("token_embd");
    for (int l = 0; l < c.n_layers; ++l) {
        const std::string prefix = "blk." + std::to_string(l) + ".";
        LayerParams p;
        p.attn_norm = at(prefix + "attn_norm");
        p.wq = at(prefix + "attn_q");
        p.wk = at(prefix + "attn_k");
        p.wv = at(prefix + "attn_v");
        p.attn_subnorm = c.subln ? at(prefix + "attn_sub_norm") : nullptr;
        p.wo = at(prefix + "attn_output");
        p.ffn_norm = at(prefix + "ffn_norm");
        p.w_gate = at(prefix + "ffn_gate");
        p.w_up = at(prefix + "ffn_up");
        p.ffn_subnorm = c.subln ? at(prefix + "ffn_sub_norm") : nullptr;
        p.w_down = at(prefix + "ffn_down");
        t.layers.push_back(p);
    }
    t.output_norm = at("output_norm");
    t.output = at("output");
    return t;
}

ModelParameters::ModelParameters(const ModelConfig& c)
    : config(c),
      layout(make_param_layout(c)),
      values(MemCategory::weights, layout.total),
      gradients(MemCategory::gradients, layout.total),
      weights(bind_tensors(c, layout, values.data())),
      grads(bind_tensors(c, layout, gradients.data())) {}

void ModelParameters::initialize(uint64_t seed) {
    for (const ParamTensor& tensor : layout.tensors) {
        float* w = values.data() + tensor.offset;
        const size_t count = tensor.count();
        if (tensor.is_matrix) {
#pragma omp parallel for schedule(static)
            for (size_t i = 0; i < count; ++i) {
                w[i] = config.init_std * normal01(seed, kStreamInit, static_cast<uint32_t>(tensor.tensor_id), i);
            }
        } else {
            for (size_t i = 0; i < count; ++i) w[i] = 1.0f;
        }
    }
}

void ModelParameters::zero_gradients() { std::memset(gradients.data(), 0, gradients.bytes()); }

}  // namespace dqt
