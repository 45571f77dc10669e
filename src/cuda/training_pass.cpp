#include "cuda/training_pass.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>

#include "core/error.h"
#include "cuda/attention_tc.h"
#include "cuda/kernels.h"
#include "cuda/quantize.h"
#include "kernels/rope.h"
#include "model/layer_values.h"
#include "model/llama.h"

namespace dqt::cuda {

namespace {

void require_supported(const ModelParameters& host) {
    const ModelConfig& c = host.config;
    if (c.ffn_activation != GatedActivation::silu) {
        throw Error("the GPU path runs the SwiGLU FFN only, not " + std::string(gated_activation_name(c.ffn_activation)) +
                    ": train with --device cpu");
    }
    if (host.method.quantize_embedding || host.method.quantize_head) {
        throw Error("the GPU path keeps the embedding and the head fp32: drop --quantize-embedding/--quantize-head or "
                    "train with --device cpu");
    }
}

template <typename T>
DeviceArray<T> device_array(MemCategory category, size_t count) {
    DeviceArray<T> array(category, count);
    array.zero();
    return array;
}

}  // namespace

DeviceModel::DeviceModel(const ModelParameters& host)
    : host_(host),
      values_(to_device(MemCategory::weights, host.values.data(), host.values.size())),
      codes_(to_device(MemCategory::weights, host.codes.data(), host.codes.size())),
      scales_(to_device(MemCategory::weights, host.scales.data(), host.scales.size())) {
    require_supported(host);
}

void DeviceModel::copy_to(ModelParameters& host) const {
    copy_to_host(host.values.data(), values_.data(), values_.bytes());
    copy_to_host(host.codes.data(), codes_.data(), codes_.bytes());
    copy_to_host(host.scales.data(), scales_.data(), scales_.bytes());
}

namespace {

// A layer's saved values but its input (which recompute keeps per layer).
void allocate_device_layer_values(DeviceLayerActivations& a, const ModelConfig& c, size_t N, size_t lse_count) {
    allocate_layer_values(a, c, N, [](size_t count) { return device_array<float>(MemCategory::activations, count); });
    a.lse = device_array<float>(MemCategory::activations, lse_count);
}

}  // namespace

int DeviceActivations::logit_chunk_rows(const ModelConfig& c, int batch, int seq, bool recompute,
                                        size_t logit_chunk_bytes) {
    const size_t N = static_cast<size_t>(batch) * seq;
    if (logit_chunk_bytes == 0 && !recompute) return static_cast<int>(N);
    const size_t bytes = logit_chunk_bytes > 0 ? logit_chunk_bytes : kLogitChunkBytes;
    const size_t rows = bytes / (static_cast<size_t>(c.vocab_size) * sizeof(float));
    return static_cast<int>(std::clamp<size_t>(rows, 1, N));
}

DeviceActivations::DeviceActivations(const ModelConfig& c, int batch_size, int seq_len, bool recompute_layers,
                                     size_t logit_chunk_bytes)
    : batch(batch_size), seq(seq_len), recompute(recompute_layers),
      logit_rows(logit_chunk_rows(c, batch_size, seq_len, recompute_layers, logit_chunk_bytes)) {
    const size_t N = static_cast<size_t>(batch) * seq;
    const size_t C = c.dim, F = c.ffn_dim, V = c.vocab_size, KV = c.kv_dim(), H = c.n_heads;
    const size_t lse_count = static_cast<size_t>(batch) * H * seq;
    const MemCategory act = MemCategory::activations, scratch = MemCategory::scratch;
    layers.resize(c.n_layers);
    for (DeviceLayerActivations& a : layers) {
        a.values[BlockValue::input] = device_array<float>(act, N * C);
        if (!recompute) allocate_device_layer_values(a, c, N, lse_count);
    }
    if (recompute) allocate_device_layer_values(lent, c, N, lse_count);
    final_input = device_array<float>(act, N * C);
    lnf = device_array<float>(act, N * C);
    lnf_rstd = device_array<float>(act, N);
    logits = device_array<float>(act, static_cast<size_t>(logit_rows) * V);
    row_loss = device_array<float>(scratch, N);
    tokens = device_array<int32_t>(act, N);
    targets = device_array<int32_t>(act, N);
    group_tokens = device_array<int32_t>(act, N);
    group_starts = device_array<int32_t>(act, N + 1);
    group_positions = device_array<int32_t>(act, N);
    d_residual = device_array<float>(scratch, N * C);
    d_c = device_array<float>(scratch, N * C);
    d_c2 = device_array<float>(scratch, N * C);
    d_q = device_array<float>(scratch, N * C);
    d_k = device_array<float>(scratch, N * KV);
    d_v = device_array<float>(scratch, N * KV);
    d_f = device_array<float>(scratch, N * F);
    d_gate = device_array<float>(scratch, N * F);
    d_up = device_array<float>(scratch, N * F);
    delta = device_array<float>(scratch, batch * H * seq);
    norm_scratch = device_array<float>(scratch, rmsnorm_scratch_floats(static_cast<int>(N), static_cast<int>(std::max(C, F))));
    const RopeTable table(seq, c.head_dim(), 0, c.rope_theta);
    rope_cos = to_device(scratch, table.cos.data(), table.cos.size());
    rope_sin = to_device(scratch, table.sin.data(), table.sin.size());
}

size_t DeviceActivations::planned_bytes(const ModelConfig& c, int batch, int seq, bool recompute) {
    const size_t N = static_cast<size_t>(batch) * seq;
    const size_t C = c.dim, F = c.ffn_dim, V = c.vocab_size, KV = c.kv_dim(), H = c.n_heads;
    auto floats = [](size_t count) { return device_block_bytes(count * sizeof(float)); };
    const size_t input = floats(N * C);
    // ln1, q, att, mid, ln2 (N x C); k, v (N x KV); gate, up, h (N x F); two rstd (N); lse
    size_t values = 5 * floats(N * C) + 2 * floats(N * KV) + 3 * floats(N * F) + 2 * floats(N) + floats(N * H);
    if (c.subln) values += floats(N * C) + floats(N * F) + 2 * floats(N);  // att_sub, h_sub and their rstd
    const size_t layers = recompute ? c.n_layers * input + values : c.n_layers * (input + values);
    // final_input, lnf, lnf_rstd, logits; tokens, targets and their groups (int32)
    auto ints = [](size_t count) { return device_block_bytes(count * sizeof(int32_t)); };
    const size_t logits = floats(static_cast<size_t>(logit_chunk_rows(c, batch, seq, recompute)) * V);
    return layers + 2 * floats(N * C) + floats(N) + logits + 4 * ints(N) + ints(N + 1);
}

void DeviceActivations::lend_values(int layer) {
    DeviceLayerActivations& a = layers[static_cast<size_t>(layer)];
    std::swap(a, lent);
    std::swap(a.values[BlockValue::input], lent.values[BlockValue::input]);  // the input stays the layer's
}

// What LinearInput (model/weight_access.h) prepares: for a quantized weight the int8 rows a and
// scales s (and `in` becomes a / s in place); for an fp weight under bf16 compute `in` rounded
// to bf16 in place.
struct TrainingPass::Input {
    float* in = nullptr;
    DeviceArray<int8_t> integers;  // (rows, cols), quantized only, category scratch
    DeviceArray<float> scales;     // (rows)
    bool quantized() const { return integers.size() > 0; }
};

TrainingPass::TrainingPass(DeviceModel& model, bool fp32_attention)
    : model_(model),
      bf16_(model.host().method.compute == ComputeDtype::bf16),
      tensor_core_attention_(bf16_ && !fp32_attention) {}

TrainingPass::Input TrainingPass::prepare(const ParamTensor& weight, float* in, int rows) {
    Input input;
    input.in = in;
    const size_t count = static_cast<size_t>(rows) * weight.cols;
    if (weight.quantized()) {
        input.integers = DeviceArray<int8_t>(MemCategory::scratch, count);
        input.scales = DeviceArray<float>(MemCategory::scratch, static_cast<size_t>(rows));
        fake_quantize_rows(in, input.integers.data(), input.scales.data(), rows, weight.cols);
    }
    if (bf16_) round_to_bf16_in_place(in, count);  // integers up to 128 are exact in bf16 anyway
    return input;
}

void TrainingPass::product(Operand a, bool transpose_a, Operand b, bool transpose_b, float* c, int m, int n, int k,
                           float beta) {
    if (!bf16_) {
        gemm_.multiply({a.values, false}, transpose_a, {b.values, false}, transpose_b, c, m, n, k, beta);
        return;
    }
    DeviceArray<uint16_t> a16, b16;  // roundings made here, for operands that come without theirs
    auto bits = [](const Operand& x, DeviceArray<uint16_t>& rounded, size_t count) {
        if (x.bf16) return x.bf16;
        rounded = DeviceArray<uint16_t>(MemCategory::scratch, count);
        round_to_bf16(rounded.data(), x.values, count);
        return static_cast<const uint16_t*>(rounded.data());
    };
    const uint16_t* a_bits = bits(a, a16, static_cast<size_t>(m) * k);
    const uint16_t* b_bits = bits(b, b16, static_cast<size_t>(k) * n);
    gemm_.multiply({a_bits, true}, transpose_a, {b_bits, true}, transpose_b, c, m, n, k, beta);
}

// The weight as the forward reads it, dense fp32 (DenseWeight): bitnet's projection, or q / scale.
void TrainingPass::dense_weight(const ParamTensor& weight, float* out) {
    const size_t count = weight.count();
    if (weight.stores_codes()) {
        dequantize_codes(out, model_.code(weight), count, model_.host().method.grid, model_.scale(weight));
        return;
    }
    DeviceArray<double> sums(MemCategory::scratch, mean_abs_scratch_doubles(count));
    DeviceArray<float> gamma(MemCategory::scratch, 1);
    mean_abs(gamma.data(), model_.value(weight), count, sums.data());
    DeviceArray<int8_t> q(MemCategory::scratch, count);
    ternary_codes(q.data(), out, model_.value(weight), count, gamma.data());
}

void TrainingPass::linear_forward(const ParamTensor& weight, float* out, const Input& in, int rows) {
    const int O = weight.rows, I = weight.cols;
    if (!in.quantized()) {
        product(in.in, false, model_.value(weight), true, out, rows, O, I, 0.0f);
        return;
    }
    // out = (a . q^T) * weight_scale / s: integers on the int8 tensor cores.
    // Everything stays on the device: no step waits for a scale to reach the host.
    DeviceArray<int8_t> q(MemCategory::scratch, weight.count());
    DeviceArray<float> weight_scale(MemCategory::scratch, 1);
    if (weight.stores_codes()) {
        codes_to_int8(q.data(), model_.code(weight), weight.count(), model_.host().method.grid);
        reciprocal(weight_scale.data(), model_.scale(weight));  // code_weight_scale
    } else {
        DeviceArray<double> sums(MemCategory::scratch, mean_abs_scratch_doubles(weight.count()));
        mean_abs(weight_scale.data(), model_.value(weight), weight.count(), sums.data());  // bitnet's gamma
        ternary_codes(q.data(), nullptr, model_.value(weight), weight.count(), weight_scale.data());
    }
    DeviceArray<int32_t> products(MemCategory::scratch, static_cast<size_t>(rows) * O);
    gemm_.multiply_int8(in.integers.data(), q.data(), products.data(), rows, O, I);
    scale_integer_products(out, products.data(), in.scales.data(), weight_scale.data(), rows, O);
}

void TrainingPass::linear_backward(const ParamTensor& weight, float* din, const float* dout, const float* in, int rows,
                                   float* gradients) {
    const int O = weight.rows, I = weight.cols;
    DeviceArray<uint16_t> dout16;  // under bf16 compute, dout rounded once for both products
    if (bf16_) {
        dout16 = DeviceArray<uint16_t>(MemCategory::scratch, static_cast<size_t>(rows) * O);
        round_to_bf16(dout16.data(), dout, dout16.size());
    }
    const Operand d_out(dout, dout16.data());
    if (din) {  // din (rows, I) += dout (rows, O) . W (O, I)
        if (weight.format == WeightFormat::f32) {
            product(d_out, false, model_.value(weight), false, din, rows, I, O, 1.0f);
        } else {
            DeviceArray<float> dense(MemCategory::scratch, weight.count());
            dense_weight(weight, dense.data());
            product(d_out, false, dense.data(), false, din, rows, I, O, 1.0f);
        }
    }
    // dW (O, I) += dout^T . in: straight-through for bitnet and dqt.
    product(d_out, true, in, false, gradients + weight.flat_offset, O, I, rows, 1.0f);
}

namespace {

// Under recompute, the layer being computed holds the one set of saved values (all but its
// input) for the scope's life.
class LentValues {
public:
    LentValues(DeviceActivations& acts, int layer) : acts_(acts), layer_(layer) {
        if (acts_.recompute) acts_.lend_values(layer_);
    }
    ~LentValues() {
        if (acts_.recompute) acts_.lend_values(layer_);
    }
    LentValues(const LentValues&) = delete;
    LentValues& operator=(const LentValues&) = delete;

private:
    DeviceActivations& acts_;
    const int layer_;
};

}  // namespace

// What one step of the decoder block in a layer works on: the shapes, the layer's tensors and
// saved activations, and where the step's input and output are saved.
struct TrainingPass::StepScope {
    StepScope(const ModelParameters& model, DeviceActivations& acts, int layer, const BlockStep& step)
        : c(model.config), p(model.tensors.layers[static_cast<size_t>(layer)]),
          a(acts.layers[static_cast<size_t>(layer)]), B(acts.batch), T(acts.seq), N(B * T), D(c.head_dim()),
          in(saved_value(acts, layer, step.in)), out(saved_value(acts, layer, step.out)) {}
    const ModelConfig& c;
    const LayerTensors& p;
    DeviceLayerActivations& a;
    const int B, T, N, D;
    const SavedValue in, out;
};

void TrainingPass::forward_step(DeviceActivations& acts, int layer, const BlockStep& step, bool recomputing) {
    const StepScope s(model_.host(), acts, layer, step);
    const size_t out_count = static_cast<size_t>(s.N) * block_value_cols(step.out, s.c);
    switch (step.op) {
        case BlockOp::rmsnorm:
            rmsnorm_forward(s.out.rows, s.out.rstd, s.in.rows, model_.value(*layer_gain(s.p, step.weights[0])), s.N,
                            block_value_cols(step.in, s.c), s.c.norm_eps);
            return;
        case BlockOp::attention: {
            const ParamTensor &wq = *layer_linear(s.p, step.weights[0]), &wk = *layer_linear(s.p, step.weights[1]),
                              &wv = *layer_linear(s.p, step.weights[2]);
            const Input input = prepare(wq, s.in.rows, s.N);
            linear_forward(wq, s.a.q.data(), input, s.N);
            linear_forward(wk, s.a.k.data(), input, s.N);
            linear_forward(wv, s.a.v.data(), input, s.N);
            rope_forward(s.a.q.data(), s.B, s.T, s.c.n_heads, s.D, acts.rope_cos.data(), acts.rope_sin.data());
            rope_forward(s.a.k.data(), s.B, s.T, s.c.n_kv_heads, s.D, acts.rope_cos.data(), acts.rope_sin.data());
            if (tensor_core_attention_) {
                attention_tc_forward(gemm_, s.out.rows, s.a.lse.data(), s.a.q.data(), s.a.k.data(), s.a.v.data(), s.B, s.T,
                                     s.c.n_heads, s.c.n_kv_heads, s.D);
            } else {
                attention_forward(s.out.rows, s.a.lse.data(), s.a.q.data(), s.a.k.data(), s.a.v.data(), s.B, s.T, s.c.n_heads,
                                  s.c.n_kv_heads, s.D);
            }
            return;
        }
        case BlockOp::gated_linears: {
            const ParamTensor &w_gate = *layer_linear(s.p, step.weights[0]), &w_up = *layer_linear(s.p, step.weights[1]);
            const Input input = prepare(w_gate, s.in.rows, s.N);
            linear_forward(w_gate, s.a.gate.data(), input, s.N);
            linear_forward(w_up, s.a.up.data(), input, s.N);
            swiglu_forward(s.out.rows, s.a.gate.data(), s.a.up.data(), out_count);  // the only activation here (DeviceModel)
            return;
        }
        case BlockOp::residual_linear: {
            const ParamTensor& weight = *layer_linear(s.p, step.weights[0]);
            const Input input = prepare(weight, s.in.rows, s.N);
            // Recomputed, the block's output is the next layer's saved input already: only the
            // input's rounding in place (prepare) is wanted again, for the weight's gradient.
            if (recomputing && step.out == BlockValue::output) return;
            linear_forward(weight, s.out.rows, input, s.N);
            add_in_place(s.out.rows, saved_value(acts, layer, step.residual).rows, out_count);
            return;
        }
    }
}

void TrainingPass::backward_step(DeviceActivations& acts, int layer, const BlockStep& step, float* gradients) {
    const StepScope s(model_.host(), acts, layer, step);
    float* d_in = value_gradient(acts, step.in);
    const float* d_out = value_gradient(acts, step.out);
    // A stream value's gradient already holds what flows along the stream: it accumulates.
    if (!on_residual_stream(step.in))
        zero_on_device(d_in, static_cast<size_t>(s.N) * block_value_cols(step.in, s.c) * sizeof(float));
    switch (step.op) {
        case BlockOp::rmsnorm: {
            const ParamTensor& gain = *layer_gain(s.p, step.weights[0]);
            rmsnorm_backward(d_in, gradients + gain.flat_offset, d_out, s.in.rows, model_.value(gain), s.out.rstd, s.N,
                             gain.cols, acts.norm_scratch.data());
            return;
        }
        case BlockOp::attention:
            acts.d_q.zero();
            acts.d_k.zero();
            acts.d_v.zero();
            if (tensor_core_attention_) {
                attention_tc_backward(gemm_, acts.d_q.data(), acts.d_k.data(), acts.d_v.data(), d_out, s.a.lse.data(),
                                      s.a.q.data(), s.a.k.data(), s.a.v.data(), s.B, s.T, s.c.n_heads, s.c.n_kv_heads, s.D);
            } else {
                attention_backward(acts.d_q.data(), acts.d_k.data(), acts.d_v.data(), d_out, s.out.rows, s.a.lse.data(),
                                   s.a.q.data(), s.a.k.data(), s.a.v.data(), s.B, s.T, s.c.n_heads, s.c.n_kv_heads, s.D,
                                   acts.delta.data());
            }
            rope_backward(acts.d_q.data(), s.B, s.T, s.c.n_heads, s.D, acts.rope_cos.data(), acts.rope_sin.data());
            rope_backward(acts.d_k.data(), s.B, s.T, s.c.n_kv_heads, s.D, acts.rope_cos.data(), acts.rope_sin.data());
            linear_backward(*layer_linear(s.p, step.weights[0]), d_in, acts.d_q.data(), s.in.rows, s.N, gradients);
            linear_backward(*layer_linear(s.p, step.weights[1]), d_in, acts.d_k.data(), s.in.rows, s.N, gradients);
            linear_backward(*layer_linear(s.p, step.weights[2]), d_in, acts.d_v.data(), s.in.rows, s.N, gradients);
            return;
        case BlockOp::gated_linears:
            acts.d_gate.zero();
            acts.d_up.zero();
            swiglu_backward(acts.d_gate.data(), acts.d_up.data(), d_out, s.a.gate.data(), s.a.up.data(),
                            static_cast<size_t>(s.N) * block_value_cols(step.out, s.c));
            linear_backward(*layer_linear(s.p, step.weights[0]), d_in, acts.d_gate.data(), s.in.rows, s.N, gradients);
            linear_backward(*layer_linear(s.p, step.weights[1]), d_in, acts.d_up.data(), s.in.rows, s.N, gradients);
            return;
        case BlockOp::residual_linear:
            // d residual += d out: both are the stream's one gradient, so nothing to add.
            linear_backward(*layer_linear(s.p, step.weights[0]), d_in, d_out, s.in.rows, s.N, gradients);
            return;
    }
}

double TrainingPass::forward(DeviceActivations& acts, const int32_t* tokens, const int32_t* targets) {
    const ModelParameters& model = model_.host();
    const ModelConfig& c = model.config;
    const int N = acts.batch * acts.seq, C = c.dim;
    const ModelTensors& w = model.tensors;
    copy_to_device(acts.tokens.data(), tokens, static_cast<size_t>(N) * sizeof(int32_t));
    copy_to_device(acts.targets.data(), targets, static_cast<size_t>(N) * sizeof(int32_t));
    const TokenGroups groups = group_by_token(tokens, N);
    acts.distinct_tokens = static_cast<int>(groups.tokens.size());
    copy_to_device(acts.group_tokens.data(), groups.tokens.data(), groups.tokens.size() * sizeof(int32_t));
    copy_to_device(acts.group_starts.data(), groups.starts.data(), groups.starts.size() * sizeof(int32_t));
    copy_to_device(acts.group_positions.data(), groups.positions.data(), groups.positions.size() * sizeof(int32_t));

    float* residual = acts.layers.empty() ? acts.final_input.data() : acts.layers[0].values[BlockValue::input].data();
    embedding_forward(residual, acts.tokens.data(), model_.value(*w.token_embd), N, C);
    const std::vector<BlockStep> block = decoder_block_steps(c);
    for (int l = 0; l < c.n_layers; ++l) {
        const LentValues values(acts, l);
        for (const BlockStep& step : block) forward_step(acts, l, step, false);
    }
    rmsnorm_forward(acts.lnf.data(), acts.lnf_rstd.data(), acts.final_input.data(), model_.value(*w.output_norm), N, C,
                    c.norm_eps);
    double loss = 0.0;
    for (int first = 0; first < N; first += acts.logit_rows) {
        const int rows = std::min(acts.logit_rows, N - first);
        float* lnf_rows = acts.lnf.data() + static_cast<size_t>(first) * C;
        linear_forward(*w.output, acts.logits.data(), prepare(*w.output, lnf_rows, rows), rows);
        loss += cross_entropy_forward_backward(nullptr, acts.logits.data(), acts.targets.data() + first, rows,
                                               c.vocab_size, 0.0f, acts.row_loss.data() + first);
    }
    return loss;
}

void TrainingPass::backward(DeviceActivations& acts, float grad_scale, float* gradients) {
    const ModelParameters& model = model_.host();
    const ModelConfig& c = model.config;
    const int N = acts.batch * acts.seq, V = c.vocab_size;
    const ModelTensors& w = model.tensors;

    acts.d_c.zero();
    for (int first = 0; first < N; first += acts.logit_rows) {
        const int rows = std::min(acts.logit_rows, N - first);
        float* lnf_rows = acts.lnf.data() + static_cast<size_t>(first) * c.dim;
        // The chunk's logits again, unless the forward's one chunk still holds them. lnf was
        // prepared in place by the forward; the head is fp32 on the GPU, whose preparation (a
        // bf16 rounding) gives the same bits twice.
        if (acts.logit_rows < N) linear_forward(*w.output, acts.logits.data(), prepare(*w.output, lnf_rows, rows), rows);
        float* dlogits = acts.logits.data();  // in place, as the CPU
        cross_entropy_forward_backward(dlogits, acts.logits.data(), acts.targets.data() + first, rows, V, grad_scale,
                                       acts.row_loss.data() + first);
        linear_backward(*w.output, acts.d_c.data() + static_cast<size_t>(first) * c.dim, dlogits, lnf_rows, rows,
                        gradients);
    }
    acts.d_residual.zero();
    rmsnorm_backward(acts.d_residual.data(), gradients + w.output_norm->flat_offset, acts.d_c.data(),
                     acts.final_input.data(), model_.value(*w.output_norm), acts.lnf_rstd.data(), N, w.output_norm->cols,
                     acts.norm_scratch.data());

    const std::vector<BlockStep> block = decoder_block_steps(c);
    for (int l = c.n_layers - 1; l >= 0; --l) {
        const LentValues values(acts, l);
        if (acts.recompute)
            for (const BlockStep& step : block) forward_step(acts, l, step, true);
        for (auto step = block.rbegin(); step != block.rend(); ++step) backward_step(acts, l, *step, gradients);
    }
    const DeviceTokenGroups groups{acts.group_tokens.data(), acts.group_starts.data(), acts.group_positions.data(),
                                   acts.distinct_tokens};
    embedding_backward(gradients + w.token_embd->flat_offset, acts.d_residual.data(), groups, c.dim);
}

DeviceOptimizer::DeviceOptimizer(const OptimizerState& host, const ParamLayout& layout) {
    moments_.reserve(layout.tensors.size());
    for (const ParamTensor& tensor : layout.tensors) moments_.emplace_back(host.of(tensor));
}

void DeviceOptimizer::copy_to(OptimizerState& host, const ParamLayout& layout) const {
    for (const ParamTensor& tensor : layout.tensors) moments_[static_cast<size_t>(tensor.tensor_id)].copy_to(host.of(tensor));
}

void DeviceOptimizer::step(DeviceModel& model, const float* gradients, const AdamWConfig& config, float lr, int64_t t,
                           uint64_t seed) {
    const ModelParameters& host = model.host();
    for (const ParamTensor& tensor : host.layout.tensors) {
        DeviceMoments& moments = moments_[static_cast<size_t>(tensor.tensor_id)];
        const float* g = gradients + tensor.flat_offset;
        if (tensor.stores_codes()) {
            DeviceDqtStep step(DeviceCodedTensor{model.code(tensor), model.scale(tensor), tensor.count(), host.method.grid,
                                                 tensor.tensor_id},
                               config, lr, t,
                               DqtRounding{host.method.rounding, seed, host.method.scale_rule, tensor.residual_bits,
                                           tensor.residual_bits > 0 ? host.method.residual_overhang : 0});
            step.apply(g, moments, 0, tensor.count());
            step.finish(moments);
        } else {
            DeviceAdamWStep(config, lr, t, tensor.is_matrix()).apply(model.value(tensor), g, moments, 0, tensor.count());
        }
    }
}

}  // namespace dqt::cuda
