#include "train/memory_estimate.h"

#include "model/parameters.h"
#include "optim/fused_update.h"

namespace dqt {

namespace {

// The bytes of all weights, by role, in each role's weight format, and (with sub-grid
// residuals) one byte for each coded weight; from the config's arithmetic alone (a crafted
// config's billion layers are never listed).
double stored_weight_bytes(const ModelConfig& c, const MethodConfig& method) {
    const size_t C = static_cast<size_t>(c.dim), V = static_cast<size_t>(c.vocab_size);
    const size_t per_layer = C * C * 2 + C * static_cast<size_t>(c.kv_dim()) * 2 + 3 * C * static_cast<size_t>(c.ffn_dim);
    const size_t block_linears = static_cast<size_t>(c.n_layers) * per_layer;
    const size_t ends = V * C * (c.tie_embeddings ? 1 : 2);
    const size_t norms = static_cast<size_t>(c.parameter_count()) - block_linears - ends;
    auto bytes = [&](TensorRole role, size_t count) {
        const WeightFormatTraits& format = weight_format_traits(weight_format_of(role, method));
        const size_t residual = format.stores_codes && method.residual_bits > 0 ? count : 0;
        return static_cast<double>(format.stored_bytes(count) + residual);
    };
    return bytes(TensorRole::block_linear, block_linears) + bytes(TensorRole::embedding, V * C) +
           (c.tie_embeddings ? 0.0 : bytes(TensorRole::head, V * C)) + bytes(TensorRole::norm, norms);
}

}  // namespace

double training_memory_lower_bound(const TrainOptions& options) {
    const double parameters = static_cast<double>(options.model.parameter_count());
    const double weight_bytes = stored_weight_bytes(options.model, options.method);
    const double gradient_bytes = options.fused_update ? 0.0 : 4.0;
    const double fused_tied_table =
        options.fused_update ? static_cast<double>(FusedUpdater::tied_gradient_bytes(options.model)) : 0.0;
    const double moment_bytes = options.optim_state == StateDtype::fp32 ? 4.0
                                : options.optim_state == StateDtype::bf16 ? 2.0
                                                                           : 1.0;
    const double tokens = static_cast<double>(options.batch) * options.model.seq_len;
    const double logits = tokens * options.model.vocab_size * 4.0;
    // The CPU forward saves every layer's (B, H, T, T) softmax; the GPU's attention keeps none
    // on the host.
    const double attention_probabilities =
        options.device == TrainDevice::cpu
            ? tokens * options.model.seq_len * options.model.n_heads * options.model.n_layers * 4.0
            : 0.0;
    return weight_bytes + parameters * (gradient_bytes + 2.0 * moment_bytes) + fused_tied_table + logits +
           attention_probabilities;
}

}  // namespace dqt
