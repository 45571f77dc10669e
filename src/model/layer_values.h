#pragma once
// The one list of what a layer's training forward saves, allocated alike for the CPU's
// Activations (model/llama.h) and the GPU's DeviceActivations (cuda/training_pass.h).
#include <cstddef>

#include "model/config.h"
#include "model/decoder_block.h"

namespace dqt {

// Allocates what a layer's forward saves, but its input and its attention's own record (the
// CPU's probabilities, the GPU's log-sum-exp): every value the block's steps write but the
// layer's output, with its rstd where an RMSNorm writes it, and the attention's and gated
// linears' own products. array(count) makes one buffer of `count` floats; N = B * T tokens.
// Generic over LayerActivations and the GPU's DeviceLayerActivations.
template <typename LayerValues, typename MakeArray>
void allocate_layer_values(LayerValues& a, const ModelConfig& c, size_t N, MakeArray array) {
    for (const BlockStep& step : decoder_block_steps(c)) {
        if (step.out == BlockValue::output) continue;
        a.values[step.out] = array(N * static_cast<size_t>(block_value_cols(step.out, c)));
        if (step.op == BlockOp::rmsnorm) a.rstd[step.out] = array(N);
    }
    const size_t C = static_cast<size_t>(c.dim), F = static_cast<size_t>(c.ffn_dim), KV = static_cast<size_t>(c.kv_dim());
    a.q = array(N * C);
    a.k = array(N * KV);
    a.v = array(N * KV);
    a.gate = array(N * F);
    a.up = array(N * F);
}

}  // namespace dqt
