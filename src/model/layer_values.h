#pragma once
// The one list of what a layer's training forward saves, allocated alike for the CPU's
// Activations (model/llama.h) and the GPU's DeviceActivations (cuda/training_pass.h).
#include <cstddef>

#include "model/config.h"

namespace dqt {

// Allocates what a layer's forward saves, but its input and its attention's own record (the
// CPU's probabilities, the GPU's log-sum-exp): array(count) makes one buffer of `count` floats.
// N = B * T tokens. Generic over LayerActivations and the GPU's DeviceLayerActivations.
template <typename LayerValues, typename MakeArray>
void allocate_layer_values(LayerValues& a, const ModelConfig& c, size_t N, MakeArray array) {
    const size_t C = static_cast<size_t>(c.dim), F = static_cast<size_t>(c.ffn_dim), KV = static_cast<size_t>(c.kv_dim());
    a.ln1 = array(N * C);
    a.ln1_rstd = array(N);
    a.q = array(N * C);
    a.k = array(N * KV);
    a.v = array(N * KV);
    a.att = array(N * C);
    if (c.subln) {
        a.att_sub = array(N * C);
        a.att_sub_rstd = array(N);
        a.h_sub = array(N * F);
        a.h_sub_rstd = array(N);
    }
    a.mid = array(N * C);
    a.ln2 = array(N * C);
    a.ln2_rstd = array(N);
    a.gate = array(N * F);
    a.up = array(N * F);
    a.h = array(N * F);
}

}  // namespace dqt
