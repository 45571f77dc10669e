#pragma once
// The decoder block, written once: one layer as a list of steps, each naming the values it reads
// and writes and the weights it uses. Every executor walks this list:
//   - the training forward (model/llama.cpp) saves each value for the backward,
//   - the training backward walks it in reverse, step by step,
//   - the inference thread team (infer/session.cpp) saves nothing and splits each step's work.
// A change to the block's architecture is a change to decoder_block_steps; an executor changes
// only when a new kind of step appears.
#include <array>
#include <cstddef>
#include <vector>

#include "core/error.h"
#include "model/config.h"

namespace dqt {

// The values flowing through one layer, for N token rows. The training forward keeps each in
// LayerActivations::values (model/llama.h).
enum class BlockValue {
    input,   // (N, C) the residual stream entering the layer
    ln1,     // (N, C) RMSNorm(input)
    att,     // (N, C) attention over ln1's queries, keys and values
    att_sub, // (N, C) SubLN(att)
    mid,     // (N, C) the residual stream after attention
    ln2,     // (N, C) RMSNorm(mid)
    h,       // (N, F) the feed-forward's hidden rows
    h_sub,   // (N, F) SubLN(h)
    output,  // (N, C) the residual stream leaving the layer: the next layer's input
};
inline constexpr size_t kBlockValueCount = static_cast<size_t>(BlockValue::output) + 1;  // output is the last

// One T per block value, indexed by it.
template <typename T>
struct PerBlockValue {
    std::array<T, kBlockValueCount> items;
    T& operator[](BlockValue value) { return items[static_cast<size_t>(value)]; }
    const T& operator[](BlockValue value) const { return items[static_cast<size_t>(value)]; }
};

// Whether a value is the residual stream (input, mid, output): one buffer updated in place by
// inference, and one gradient (accumulated, never zeroed) in the backward.
bool on_residual_stream(BlockValue value);
// The value's row length: C, or F for h and h_sub.
int block_value_cols(BlockValue value, const ModelConfig& config);

// A layer's weights by role; LayerTensors and InferenceLayer name their fields alike.
enum class BlockWeight { attn_norm, wq, wk, wv, attn_subnorm, wo, ffn_norm, w_gate, w_up, ffn_subnorm, w_down };

enum class BlockOp {
    rmsnorm,          // out = RMSNorm(in) * gain                                  weights: {gain}
    attention,        // out = Attn(RoPE(Wq·in), RoPE(Wk·in), Wv·in): causal,     weights: {wq, wk, wv}
                      //       grouped-query, softmax(q·k / sqrt(D))·v per head
    gated_linears,    // out = act(Wgate·in) * (Wup·in): SwiGLU or ReLU²-GLU        weights: {w_gate, w_up}
    residual_linear,  // out = residual + W·in; out and residual are the stream      weights: {W}
};

struct BlockStep {
    BlockOp op;
    BlockValue in;
    BlockValue out;
    std::array<BlockWeight, 3> weights;  // the op's, in the order above (unused slots repeat the last)
    BlockValue residual = BlockValue::input;  // residual_linear: the stream value out adds to
};

// One layer of `config`'s architecture, in order (the SubLN steps only where config.subln):
//   ln1 = RMSNorm(input); att = Attn(ln1); [att_sub = SubLN(att)]; mid = input + Wo·att_sub
//   ln2 = RMSNorm(mid);   h = act(Wgate·ln2) * (Wup·ln2); [h_sub = SubLN(h)]; output = mid + Wdown·h_sub
std::vector<BlockStep> decoder_block_steps(const ModelConfig& config);

// A layer's tensor in a role. Norm gains (attn_norm, attn_subnorm, ffn_norm, ffn_subnorm) and
// linears are asked for apart, because InferenceLayer keeps them in different types.
template <typename Layer>
decltype(auto) layer_gain(Layer& layer, BlockWeight weight) {
    switch (weight) {
        case BlockWeight::attn_norm: return (layer.attn_norm);
        case BlockWeight::attn_subnorm: return (layer.attn_subnorm);
        case BlockWeight::ffn_norm: return (layer.ffn_norm);
        case BlockWeight::ffn_subnorm: return (layer.ffn_subnorm);
        default: throw Error("decoder block: a linear's role asked for as a norm gain");
    }
}
template <typename Layer>
decltype(auto) layer_linear(Layer& layer, BlockWeight weight) {
    switch (weight) {
        case BlockWeight::wq: return (layer.wq);
        case BlockWeight::wk: return (layer.wk);
        case BlockWeight::wv: return (layer.wv);
        case BlockWeight::wo: return (layer.wo);
        case BlockWeight::w_gate: return (layer.w_gate);
        case BlockWeight::w_up: return (layer.w_up);
        case BlockWeight::w_down: return (layer.w_down);
        default: throw Error("decoder block: a norm gain's role asked for as a linear");
    }
}

}  // namespace dqt
