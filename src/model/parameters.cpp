#include "model/parameters.h"

#include <algorithm>
#include <numeric>

#include "core/error.h"

namespace dqt {

const ParamTensor& ParamLayout::find(const std::string& name) const {
    for (const ParamTensor& tensor : tensors) {
        if (tensor.name == name) return tensor;
    }
    throw Error("no parameter named " + name);
}

namespace {

size_t round_up(size_t value, size_t multiple) { return (value + multiple - 1) / multiple * multiple; }

// Rows per gradient piece of the embedding or head: in steps of `unit`, so that every piece
// starts at a multiple of kGradientPieceAlign, up to the largest block linear's size.
int embedding_piece_rows(const ParamTensor& tensor, size_t largest_block_linear) {
    const size_t cols = static_cast<size_t>(tensor.cols);
    const size_t unit = kGradientPieceAlign / std::gcd(cols, kGradientPieceAlign);
    const size_t rows = std::max(unit, largest_block_linear / cols / unit * unit);
    return static_cast<int>(std::min(rows, static_cast<size_t>(tensor.rows)));
}

}  // namespace

ParamLayout make_param_layout(const ModelConfig& c, const MethodConfig& method) {
    ParamLayout layout;
    auto add = [&](const std::string& name, int rows, int cols, TensorRole role) {
        ParamTensor tensor;
        tensor.name = name;
        tensor.rows = rows;
        tensor.cols = cols;
        tensor.role = role;
        tensor.tensor_id = static_cast<int>(layout.tensors.size());
        tensor.format = weight_format_of(role, method);
        // Every tensor starts 64-byte aligned inside its array; in the gradient layout on
        // kGradientTensorAlign (data-parallel shards cut there).
        tensor.flat_offset = layout.total;
        layout.total += round_up(tensor.count(), kGradientTensorAlign);
        if (tensor.stores_codes()) {
            tensor.residual_bits = method.residual_bits;
            tensor.code_offset = layout.code_total;
            layout.code_total += round_up(tensor.traits().stored_bytes(tensor.count()), 64);
        } else {
            tensor.value_offset = layout.value_total;
            layout.value_total += round_up(tensor.count(), 16);
        }
        layout.tensors.push_back(tensor);
    };
    add("token_embd", c.vocab_size, c.dim, TensorRole::embedding);
    for (int l = 0; l < c.n_layers; ++l) {
        const std::string prefix = "blk." + std::to_string(l) + ".";
        add(prefix + "attn_norm", 1, c.dim, TensorRole::norm);
        add(prefix + "attn_q", c.dim, c.dim, TensorRole::block_linear);
        add(prefix + "attn_k", c.kv_dim(), c.dim, TensorRole::block_linear);
        add(prefix + "attn_v", c.kv_dim(), c.dim, TensorRole::block_linear);
        if (c.subln) add(prefix + "attn_sub_norm", 1, c.dim, TensorRole::norm);
        add(prefix + "attn_output", c.dim, c.dim, TensorRole::block_linear);
        add(prefix + "ffn_norm", 1, c.dim, TensorRole::norm);
        add(prefix + "ffn_gate", c.ffn_dim, c.dim, TensorRole::block_linear);
        add(prefix + "ffn_up", c.ffn_dim, c.dim, TensorRole::block_linear);
        if (c.subln) add(prefix + "ffn_sub_norm", 1, c.ffn_dim, TensorRole::norm);
        add(prefix + "ffn_down", c.dim, c.ffn_dim, TensorRole::block_linear);
    }
    add("output_norm", 1, c.dim, TensorRole::norm);
    if (!c.tie_embeddings) add("output", c.vocab_size, c.dim, TensorRole::head);

    size_t largest_block_linear = 0;
    for (const ParamTensor& tensor : layout.tensors) {
        if (tensor.role == TensorRole::block_linear) {
            largest_block_linear = std::max(largest_block_linear, tensor.count());
        }
    }
    for (ParamTensor& tensor : layout.tensors) {
        const bool sliced = tensor.role == TensorRole::embedding || tensor.role == TensorRole::head;
        tensor.piece_rows = sliced ? embedding_piece_rows(tensor, largest_block_linear) : tensor.rows;
    }
    return layout;
}

ModelTensors bind_tensors(const ModelConfig& c, const ParamLayout& layout) {
    auto at = [&](const std::string& name) { return &layout.find(name); };
    ModelTensors t;
    t.token_embd = at("token_embd");
    for (int l = 0; l < c.n_layers; ++l) {
        const std::string prefix = "blk." + std::to_string(l) + ".";
        LayerTensors p;
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
    t.output = c.tie_embeddings ? t.token_embd : at("output");
    return t;
}

ModelParameters::ModelParameters(const ModelConfig& c, const MethodConfig& m)
    : config(c),
      method(m),
      layout(make_param_layout(c, m)),
      values(MemCategory::weights, layout.value_total),
      codes(MemCategory::weights, layout.code_total),
      scales(MemCategory::weights, layout.tensors.size()),
      tensors(bind_tensors(c, layout)) {}

void ModelParameters::read_dense(const ParamTensor& tensor, float* out) const {
    tensor.traits().read_stored(stored(tensor), tensor, 0, tensor.count(), out);
}

StoredTensor ModelParameters::stored(const ParamTensor& tensor) const {
    if (!tensor.stores_codes()) return {value(tensor), nullptr, 0.0f, method.grid};
    return {nullptr, code(tensor), scale(tensor), method.grid};
}

}  // namespace dqt
