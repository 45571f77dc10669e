#pragma once
// All trainable tensors of one model, each in the weight format the training method gives it
// (model/weight_format.h): fp32-stored tensors in one contiguous fp32 array (`values`),
// integer-coded tensors (dqt) in one byte array (`codes`) with one scale each. Gradients live elsewhere (model/gradient_sink.h):
// a fused update never holds the whole model's.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/memory.h"
#include "model/config.h"
#include "model/method.h"
#include "model/weight_format.h"

namespace dqt {

enum class TensorRole { embedding, norm, block_linear, head };

struct ParamTensor {
    std::string name;         // GGUF-like: "token_embd", "blk.0.attn_q", "output_norm", ...
    int rows = 0;             // matrices: (out_features, in_features); vectors: rows = 1
    int cols = 0;
    TensorRole role = TensorRole::norm;
    int tensor_id = 0;        // position in the list: keys the counter-based RNG
    size_t flat_offset = 0;   // in the whole-model order of gradients, optimizer state and shards, in floats
    WeightFormat format = WeightFormat::f32;
    size_t value_offset = 0;  // fp32-stored formats: into ModelParameters::values, in floats
    size_t code_offset = 0;   // coded formats: into ModelParameters::codes, in bytes
    int residual_bits = 0;    // coded formats: bits of the sub-grid residual the optimizer state keeps (0: none)
    int piece_rows = 0;       // rows per gradient piece (model/gradient_sink.h)

    size_t count() const { return static_cast<size_t>(rows) * cols; }
    const WeightFormatTraits& traits() const { return weight_format_traits(format); }
    bool stores_codes() const { return traits().stores_codes; }
    bool quantized() const { return traits().quantized; }  // the forward reads integers (bitnet or dqt)
    bool is_matrix() const { return role != TensorRole::norm; }  // matrices get weight decay
};

// Elements [first, last) of one tensor (empty when first == last).
struct ElementRange {
    size_t first = 0, last = 0;
    bool empty() const { return first == last; }
    size_t size() const { return last - first; }
};

// Each tensor starts on a multiple of this many floats in a whole-model gradient buffer (so
// data-parallel shard cuts, data_parallel/shard_plan.h, fall on whole state blocks and code bytes).
inline constexpr size_t kGradientTensorAlign = 256;
// A gradient piece is a whole tensor, but for the embedding and the lm_head: slices no larger
// than the largest block linear, each starting at a multiple of kGradientPieceAlign values
// (whole 8-bit optimizer-state blocks, whole packed code bytes).
inline constexpr size_t kGradientPieceAlign = 256;

struct ParamLayout {
    std::vector<ParamTensor> tensors;
    size_t total = 0;        // floats of a whole-model gradient buffer (each tensor kGradientTensorAlign-aligned)
    size_t value_total = 0;  // floats of f32-stored values
    size_t code_total = 0;   // bytes of codes
    const ParamTensor& find(const std::string& name) const;
};

ParamLayout make_param_layout(const ModelConfig& config, const MethodConfig& method);

// The tensors of one block (pointers into ParamLayout::tensors).
struct LayerTensors {
    const ParamTensor* attn_norm;    // (C)
    const ParamTensor* wq;           // (C, C)
    const ParamTensor* wk;           // (KV, C)
    const ParamTensor* wv;           // (KV, C)
    const ParamTensor* attn_subnorm; // (C), null without SubLN
    const ParamTensor* wo;           // (C, C)
    const ParamTensor* ffn_norm;     // (C)
    const ParamTensor* w_gate;       // (F, C)
    const ParamTensor* w_up;         // (F, C)
    const ParamTensor* ffn_subnorm;  // (F), null without SubLN
    const ParamTensor* w_down;       // (C, F)
};

struct ModelTensors {
    const ParamTensor* token_embd;   // (V, C)
    std::vector<LayerTensors> layers;
    const ParamTensor* output_norm;  // (C)
    const ParamTensor* output;       // (V, C) lm_head; token_embd itself when tied
};

// The tensors of `layout` (made for `config`) by their place in the model.
ModelTensors bind_tensors(const ModelConfig& config, const ParamLayout& layout);

class ModelParameters {
public:
    ModelConfig config;
    MethodConfig method;
    ParamLayout layout;
    Array<float> values;     // (layout.value_total) f32-stored tensors, category weights
    Array<uint8_t> codes;    // (layout.code_total) integer codes, category weights
    Array<float> scales;     // (tensors) code scale per tensor (0 for f32 ones), category weights
    ModelTensors tensors;

    explicit ModelParameters(const ModelConfig& config, const MethodConfig& method = MethodConfig{});
    ModelParameters(const ModelParameters&) = delete;
    ModelParameters& operator=(const ModelParameters&) = delete;

    float* value(const ParamTensor& tensor) const { return values.data() + tensor.value_offset; }
    uint8_t* code(const ParamTensor& tensor) const { return codes.data() + tensor.code_offset; }
    float& scale(const ParamTensor& tensor) const { return scales[static_cast<size_t>(tensor.tensor_id)]; }
    // The tensor as its weight format's reads take it (model/weight_format.h).
    StoredTensor stored(const ParamTensor& tensor) const;

    // out (count) = the tensor's stored value as real numbers: its fp32 values, or q / scale.
    void read_dense(const ParamTensor& tensor, float* out) const;
};

}  // namespace dqt
