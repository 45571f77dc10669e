#pragma once
// The training step on the GPU: model/llama.h's forward and backward, the decoder block's steps
// (model/decoder_block.h) one by one, and the
// optimizer over a whole-model gradient, with the parameters, gradients, optimizer state and
// activations in GPU memory (accounted by category, cuda/device_memory.h).
//
// The weights live on the GPU as on the CPU (ModelParameters' three arrays: fp32 values, packed
// codes, scales), so a dqt model's block linears exist only as codes: the forward multiplies
// int8 activations by the codes as int8 on the tensor cores (exact int32 sums), and a dense copy
// of a weight exists only inside the op that needs it (the input gradient), as on the CPU.
// Compute fp32 (fp32 products, no TF32) or bf16 (operands rounded to bf16, fp32 sums), as
// MethodConfig::compute says. The linears' arithmetic is the CPU's either way; under bf16 the
// attention's products take bf16 operands on the tensor cores too (cuda/attention_tc.h), where
// the CPU's attention stays fp32. A GPU step follows the CPU step within that rounding
// (tests/cuda/test_cuda_training.cpp).
//
// Not yet: quantized embedding or head, the ReLU^2 FFN, fused (piece-wise) updates.
#include <cstdint>
#include <memory>
#include <vector>

#include "cuda/device_memory.h"
#include "cuda/gemm.h"
#include "cuda/optimizer_update.h"
#include "model/decoder_block.h"
#include "model/parameters.h"
#include "optim/optimizer_state.h"

namespace dqt::cuda {

// A model's parameters on the GPU, laid out as ModelParameters (category weights).
class DeviceModel {
public:
    // dqt::Error for what the GPU path does not run yet.
    explicit DeviceModel(const ModelParameters& host);
    void copy_to(ModelParameters& host) const;

    const ModelParameters& host() const { return host_; }  // config, method, layout, tensors
    float* value(const ParamTensor& tensor) const { return values_.data() + tensor.value_offset; }
    uint8_t* code(const ParamTensor& tensor) const { return codes_.data() + tensor.code_offset; }
    float* scale(const ParamTensor& tensor) const { return scales_.data() + tensor.tensor_id; }

private:
    const ModelParameters& host_;
    DeviceArray<float> values_;
    DeviceArray<uint8_t> codes_;
    DeviceArray<float> scales_;
};

// Saved forward state of one micro-batch and the backward's scratch.
struct DeviceLayerActivations {
    PerBlockValue<DeviceArray<float>> values, rstd;  // as LayerActivations' (model/llama.h)
    DeviceArray<float> q, k, v, lse, gate, up;
};

struct DeviceActivations {
    int batch = 0, seq = 0;
    // recompute: each layer saves only its input; the rest of a layer's values are one set
    // (`lent`), which the layer being computed holds (lend_values), and the backward recomputes
    // a layer's forward into it before taking its steps back. One layer's activations in place
    // of n_layers', for one more forward of the block.
    bool recompute = false;
    std::vector<DeviceLayerActivations> layers;
    DeviceLayerActivations lent;  // recompute only: every value but the input
    // The head's logits in chunks of logit_rows rows, at most logit_chunk_bytes at once: the
    // forward takes each chunk's loss, the backward computes the chunk again for its gradient
    // (where one chunk holds every row, the forward's logits are kept). recompute chunks them by
    // kLogitChunkBytes: the whole (N, V) matrix is then the largest activation (2 GiB at the
    // 130M model's 16k tokens); without it, one chunk of every row, for speed.
    int logit_rows = 0;
    DeviceArray<float> final_input, lnf, lnf_rstd, row_loss;
    DeviceArray<float> logits;  // (logit_rows, V)
    DeviceArray<int32_t> tokens, targets;
    // The micro-batch's positions grouped by token (cuda/kernels.h's TokenGroups, capacity N each)
    // for the embedding backward; distinct_tokens groups are in use.
    DeviceArray<int32_t> group_tokens, group_starts, group_positions;
    int distinct_tokens = 0;
    DeviceArray<float> d_residual, d_c, d_c2, d_q, d_k, d_v, d_f, d_gate, d_up, delta, norm_scratch;
    DeviceArray<float> rope_cos, rope_sin;  // (seq, head_dim / 2), kernels/rope.h's table

    static constexpr size_t kLogitChunkBytes = size_t{256} << 20;
    // logit_chunk_bytes 0: as recompute says (kLogitChunkBytes, or every row in one chunk).
    DeviceActivations(const ModelConfig& config, int batch, int seq, bool recompute = false,
                      size_t logit_chunk_bytes = 0);
    // The bytes of the activations category the constructor allocates (the ledger's blocks): the
    // memory plan checks them against the device's free memory before anything is allocated.
    static size_t planned_bytes(const ModelConfig& config, int batch, int seq, bool recompute = false);
    // Rows of logits a chunk holds: as many as logit_chunk_bytes takes (0: as recompute says), at
    // least one, at most N.
    static int logit_chunk_rows(const ModelConfig& config, int batch, int seq, bool recompute,
                                size_t logit_chunk_bytes = 0);
    // recompute: gives layer `layer` the lent values, or takes them back (the same call again).
    void lend_values(int layer);
};

class TrainingPass {
public:
    // fp32_attention keeps the fp32 attention kernels under bf16 compute, the CPU's arithmetic:
    // the per-step test holds the bf16 linears to the CPU's that way.
    explicit TrainingPass(DeviceModel& model, bool fp32_attention = false);
    // tokens, targets (B * T) host arrays; returns the summed cross-entropy (nats).
    double forward(DeviceActivations& acts, const int32_t* tokens, const int32_t* targets);
    // Gradients of the last forward, scaled by grad_scale, added into gradients (layout.total,
    // device, laid out by flat_offset).
    void backward(DeviceActivations& acts, float grad_scale, float* gradients);

private:
    struct Input;  // a linear's input prepared for its weights (quantized rows, or bf16-rounded)
    Input prepare(const ParamTensor& weight, float* in, int rows);
    void linear_forward(const ParamTensor& weight, float* out, const Input& in, int rows);
    void linear_backward(const ParamTensor& weight, float* din, const float* dout, const float* in, int rows,
                         float* gradients);
    void dense_weight(const ParamTensor& weight, float* out);
    // One step of the decoder block (model/decoder_block.h) in `layer`: forward saves its output
    // in acts (recomputing: a layer's forward again, inside the backward); backward adds its part
    // to its input's gradient and its weights' to gradients.
    struct StepScope;
    void forward_step(DeviceActivations& acts, int layer, const BlockStep& step, bool recomputing);
    void backward_step(DeviceActivations& acts, int layer, const BlockStep& step, float* gradients);
    // A product's operand: fp32 values, and under bf16 compute maybe their bf16 bits already, so
    // that an operand two products share is rounded once.
    struct Operand {
        Operand(const float* values) : values(values) {}  // NOLINT: implicit, most operands are plain
        Operand(const float* values, const uint16_t* bf16) : values(values), bf16(bf16) {}
        const float* values;
        const uint16_t* bf16 = nullptr;
    };
    void product(Operand a, bool transpose_a, Operand b, bool transpose_b, float* c, int m, int n, int k, float beta);

    DeviceModel& model_;
    Gemm gemm_;
    bool bf16_;
    bool tensor_core_attention_;
};

// Every tensor's Adam moments on the GPU, and the optimizer step over a whole-model gradient.
class DeviceOptimizer {
public:
    explicit DeviceOptimizer(const OptimizerState& host, const ParamLayout& layout);
    void copy_to(OptimizerState& host, const ParamLayout& layout) const;
    // optimizer_step_range's step of every element; t 1-based; gradients (layout.total, device).
    void step(DeviceModel& model, const float* gradients, const AdamWConfig& config, float lr, int64_t t,
              uint64_t seed);

private:
    std::vector<DeviceMoments> moments_;  // by tensor id
};

}  // namespace dqt::cuda
