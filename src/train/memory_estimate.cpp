#include "train/memory_estimate.h"

#include <string>

#include "core/error.h"
#include "core/memory.h"
#include "model/layer_values.h"
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

// One layer's saved values as counts of floats: allocate_layer_values's arrays are numbers here.
struct CountedLayerValues {
    PerBlockValue<double> values{}, rstd{};
    double q = 0, k = 0, v = 0, gate = 0, up = 0;
};

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
    const double activations =
        options.device == TrainDevice::cpu
            ? training_activation_bytes(options.model, options.batch)
            : static_cast<double>(options.batch) * options.model.seq_len * options.model.vocab_size * 4.0;
    return weight_bytes + parameters * (gradient_bytes + 2.0 * moment_bytes) + fused_tied_table + activations;
}

void require_training_fits_in_memory(const TrainOptions& options) {
    const double needed_gib = training_memory_lower_bound(options) / (1 << 30);
    const double machine_gib = static_cast<double>(physical_memory_bytes()) / (1 << 30);
    require(needed_gib <= machine_gib,
            "training this model (" + std::to_string(options.model.parameter_count()) + " parameters, " +
                std::to_string(static_cast<int64_t>(options.batch) * options.model.seq_len) +
                " tokens per micro-batch) needs at least " + format_number(needed_gib) +
                " GiB for its weights, gradients, Adam state and activations, more than this machine's " +
                format_number(machine_gib) + " GiB of memory: lower --batch or --seq-len, or train a smaller model");
}

double training_activation_bytes(const ModelConfig& c, int batch) {
    const size_t tokens = static_cast<size_t>(batch) * static_cast<size_t>(c.seq_len);
    CountedLayerValues saved;
    allocate_layer_values(saved, c, tokens, [](size_t count) { return static_cast<double>(count); });
    double saved_floats = saved.q + saved.k + saved.v + saved.gate + saved.up;
    for (const double floats : saved.values.items) saved_floats += floats;
    for (const double floats : saved.rstd.items) saved_floats += floats;
    const double N = static_cast<double>(tokens), C = c.dim, F = c.ffn_dim, KV = c.kv_dim();
    const double softmax = N * c.n_heads * c.seq_len;         // (B, H, T, T)
    const double per_layer = N * C + saved_floats + softmax;  // the input, the block's values, the softmax
    const double ends = 2 * N * C + N + N * c.vocab_size;     // final_input, lnf, lnf_rstd, logits
    const double token_ids = 2 * N;                           // tokens, targets (int32)
    const double backward_scratch = 4 * N * C + 2 * N * KV + 3 * N * F + softmax;
    return 4.0 * (c.n_layers * per_layer + ends + token_ids + backward_scratch);
}

}  // namespace dqt
