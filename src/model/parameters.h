#pragma once
// All trainable tensors of one model, carved out of one contiguous fp32 allocation (values,
// category weights) and a matching one for gradients (category gradients). Contiguity keeps
// the optimizer, clipping and checkpoints one loop over one array.
#include <string>
#include <vector>

#include "core/memory.h"
#include "model/config.h"

namespace dqt {

struct ParamTensor {
    std::string name;       // GGUF-like: "token_embd", "blk.0.attn_q", "output_norm", ...
    int rows = 0;           // matrices: (out_features, in_features); vectors: rows = 1
    int cols = 0;
    size_t offset = 0;      // into the contiguous arrays, in floats
    bool is_matrix = false; // matrices get weight decay, norm gains do not
    int tensor_id = 0;      // position in the list: keys the counter-based RNG
    size_t count() const { return static_cast<size_t>(rows) * cols; }
};

struct LayerParams {
    float* attn_norm;    // (C)
    float* wq;           // (C, C)
    float* wk;           // (KV, C)
    float* wv;           // (KV, C)
    float* attn_subnorm; // (C), null without SubLN
    float* wo;           // (C, C)
    float* ffn_norm;     // (C)
    float* w_gate;       // (F, C)
    float* w_up;         // (F, C)
    float* ffn_subnorm;  // (F), null without SubLN
    float* w_down;       // (C, F)
};

// Named pointers into one flat array (values or gradients) laid out by `ParamLayout`.
struct ModelTensors {
    float* token_embd;   // (V, C)
    std::vector<LayerParams> layers;
    float* output_norm;  // (C)
    float* output;       // (V, C) lm_head
};

struct ParamLayout {
    std::vector<ParamTensor> tensors;
    size_t total = 0;  // floats
    const ParamTensor& find(const std::string& name) const;
};

ParamLayout make_param_layout(const ModelConfig& config);
ModelTensors bind_tensors(const ModelConfig& config, const ParamLayout& layout, float* base);

struct ModelParameters {
    ModelConfig config;
    ParamLayout layout;
    Array<float> values;     // (total) category weights
    Array<float> gradients;  // (total) category gradients
    ModelTensors weights;    // views into values
    ModelTensors grads;      // views into gradients

    explicit ModelParameters(const ModelConfig& config);
    // N(0, init_std) for matrices, 1 for norm gains; keyed on (seed, tensor id, element).
    void initialize(uint64_t seed);
    void zero_gradients();
};

}  // namespace dqt
