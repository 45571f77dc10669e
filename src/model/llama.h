#pragma once
// The LLaMA decoder's training forward and backward (llm.c style): each layer runs the decoder
// block's steps (model/decoder_block.h), forward in order, backward in reverse. Activations for
// one micro-batch of (B, T) tokens live in `Activations`; backward hands every gradient to a
// GradientSink.
#include <cstdint>
#include <vector>

#include "core/memory.h"
#include "model/decoder_block.h"
#include "model/gradient_sink.h"
#include "model/parameters.h"

namespace dqt {

// Saved forward state of one layer, all category activations; N = B * T token rows.
struct LayerActivations {
    // values[v]: (N, block_value_cols(v)), each value the block's steps write (SubLN's only
    // with SubLN), and the input; not the output, which is the next layer's input.
    PerBlockValue<Array<float>> values;
    PerBlockValue<Array<float>> rstd;  // (N) of each RMSNorm's output: ln1, att_sub, ln2, h_sub
    Array<float> q;      // (B, T, H, D) after RoPE
    Array<float> k;      // (B, T, Hkv, D) after RoPE
    Array<float> v;      // (B, T, Hkv, D)
    Array<float> probs;  // (B, H, T, T) causal softmax
    Array<float> gate;   // (B, T, F)
    Array<float> up;     // (B, T, F)
};

struct Activations {
    int batch = 0, seq = 0;
    std::vector<LayerActivations> layers;
    Array<float> final_input;  // (B, T, C) residual after the last layer
    Array<float> lnf;          // (B, T, C)
    Array<float> lnf_rstd;     // (B, T)
    Array<float> logits;       // (B, T, V); overwritten by dlogits in backward
    Array<int32_t> tokens;     // (B, T)
    Array<int32_t> targets;    // (B, T)

    // Backward scratch (category scratch), reused across layers.
    Array<float> d_residual;   // (B, T, C) dL/d residual stream
    Array<float> d_c;          // (B, T, C)
    Array<float> d_c2;         // (B, T, C)
    Array<float> d_q;          // (B, T, H, D)
    Array<float> d_k;          // (B, T, Hkv, D)
    Array<float> d_v;          // (B, T, Hkv, D)
    Array<float> d_f;          // (B, T, F)
    Array<float> d_gate;       // (B, T, F)
    Array<float> d_up;         // (B, T, F)
    Array<float> d_attention;  // attention backward scratch

    Activations(const ModelConfig& config, int batch, int seq);
};

// Where the training forward saves a value of the decoder block (model/decoder_block.h) in
// layer `layer`: its rows, and the rstd of the RMSNorm that made it (norm outputs only). Generic
// over Activations and the GPU's DeviceActivations, whose fields are named alike.
struct SavedValue {
    float* rows;
    float* rstd;
};
template <typename SavedActivations>
SavedValue saved_value(SavedActivations& acts, int layer, BlockValue value) {
    size_t saved_in = static_cast<size_t>(layer);
    if (value == BlockValue::output) {  // the next layer's input
        if (++saved_in == acts.layers.size()) return {acts.final_input.data(), nullptr};
        value = BlockValue::input;
    }
    auto& a = acts.layers[saved_in];
    return {a.values[value].data(), a.rstd[value].data()};
}

// A value's gradient in the backward's scratch. Values whose gradients are never live at once
// share a buffer: h_sub's is dead before the gated step's backward fills d_gate.
template <typename SavedActivations>
float* value_gradient(SavedActivations& acts, BlockValue value) {
    switch (value) {
        case BlockValue::ln1:
        case BlockValue::att_sub:
        case BlockValue::ln2: return acts.d_c.data();
        case BlockValue::att: return acts.d_c2.data();
        case BlockValue::h: return acts.d_f.data();
        case BlockValue::h_sub: return acts.d_gate.data();
        default: return acts.d_residual.data();  // the stream: input, mid, output
    }
}

// Forward over tokens (B, T) already copied into acts.tokens. If targets are given
// (acts.targets filled, with_targets true) returns the summed cross-entropy in nats over all
// B*T positions; logits stay in acts.logits.
double model_forward(const ModelParameters& model, Activations& acts, bool with_targets);

// Backward of the last model_forward (which must have had targets). The loss gradient is
// scaled by grad_scale (1 / tokens in the whole optimizer step); each parameter's gradient
// goes to the sink (model/gradient_sink.h).
void model_backward(ModelParameters& model, Activations& acts, float grad_scale, GradientSink& sink);

}  // namespace dqt
