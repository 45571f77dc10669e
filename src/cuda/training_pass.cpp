#include "cuda/training_pass.h"

#include <cmath>
#include <string>

#include "core/error.h"
#include "cuda/attention_tc.h"
#include "cuda/kernels.h"
#include "cuda/quantize.h"
#include "kernels/rope.h"

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

DeviceActivations::DeviceActivations(const ModelConfig& c, int batch_size, int seq_len) : batch(batch_size), seq(seq_len) {
    const size_t N = static_cast<size_t>(batch) * seq;
    const size_t C = c.dim, F = c.ffn_dim, V = c.vocab_size, KV = c.kv_dim(), H = c.n_heads;
    const MemCategory act = MemCategory::activations, scratch = MemCategory::scratch;
    layers.resize(c.n_layers);
    for (DeviceLayerActivations& a : layers) {
        a.input = device_array<float>(act, N * C);
        a.ln1 = device_array<float>(act, N * C);
        a.ln1_rstd = device_array<float>(act, N);
        a.q = device_array<float>(act, N * C);
        a.k = device_array<float>(act, N * KV);
        a.v = device_array<float>(act, N * KV);
        a.lse = device_array<float>(act, batch * H * seq);
        a.att = device_array<float>(act, N * C);
        if (c.subln) {
            a.att_sub = device_array<float>(act, N * C);
            a.att_sub_rstd = device_array<float>(act, N);
            a.h_sub = device_array<float>(act, N * F);
            a.h_sub_rstd = device_array<float>(act, N);
        }
        a.mid = device_array<float>(act, N * C);
        a.ln2 = device_array<float>(act, N * C);
        a.ln2_rstd = device_array<float>(act, N);
        a.gate = device_array<float>(act, N * F);
        a.up = device_array<float>(act, N * F);
        a.h = device_array<float>(act, N * F);
    }
    final_input = device_array<float>(act, N * C);
    lnf = device_array<float>(act, N * C);
    lnf_rstd = device_array<float>(act, N);
    logits = device_array<float>(act, N * V);
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

size_t DeviceActivations::planned_bytes(const ModelConfig& c, int batch, int seq) {
    const size_t N = static_cast<size_t>(batch) * seq;
    const size_t C = c.dim, F = c.ffn_dim, V = c.vocab_size, KV = c.kv_dim(), H = c.n_heads;
    auto floats = [](size_t count) { return device_block_bytes(count * sizeof(float)); };
    // input, ln1, q, att, mid, ln2 (N x C); k, v (N x KV); gate, up, h (N x F); two rstd (N); lse
    size_t layer = 6 * floats(N * C) + 2 * floats(N * KV) + 3 * floats(N * F) + 2 * floats(N) + floats(N * H);
    if (c.subln) layer += floats(N * C) + floats(N * F) + 2 * floats(N);  // att_sub, h_sub and their rstd
    // final_input, lnf, lnf_rstd, logits; tokens, targets and their groups (int32)
    auto ints = [](size_t count) { return device_block_bytes(count * sizeof(int32_t)); };
    return c.n_layers * layer + 2 * floats(N * C) + floats(N) + floats(N * V) + 4 * ints(N) + ints(N + 1);
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

double TrainingPass::forward(DeviceActivations& acts, const int32_t* tokens, const int32_t* targets) {
    const ModelParameters& model = model_.host();
    const ModelConfig& c = model.config;
    const int B = acts.batch, T = acts.seq, N = B * T;
    const int C = c.dim, F = c.ffn_dim, D = c.head_dim();
    const ModelTensors& w = model.tensors;
    copy_to_device(acts.tokens.data(), tokens, static_cast<size_t>(N) * sizeof(int32_t));
    copy_to_device(acts.targets.data(), targets, static_cast<size_t>(N) * sizeof(int32_t));
    const TokenGroups groups = group_by_token(tokens, N);
    acts.distinct_tokens = static_cast<int>(groups.tokens.size());
    copy_to_device(acts.group_tokens.data(), groups.tokens.data(), groups.tokens.size() * sizeof(int32_t));
    copy_to_device(acts.group_starts.data(), groups.starts.data(), groups.starts.size() * sizeof(int32_t));
    copy_to_device(acts.group_positions.data(), groups.positions.data(), groups.positions.size() * sizeof(int32_t));

    float* residual = acts.layers.empty() ? acts.final_input.data() : acts.layers[0].input.data();
    embedding_forward(residual, acts.tokens.data(), model_.value(*w.token_embd), N, C);
    for (int l = 0; l < c.n_layers; ++l) {
        DeviceLayerActivations& a = acts.layers[l];
        const LayerTensors& p = w.layers[l];
        float* next = l + 1 < c.n_layers ? acts.layers[l + 1].input.data() : acts.final_input.data();

        rmsnorm_forward(a.ln1.data(), a.ln1_rstd.data(), a.input.data(), model_.value(*p.attn_norm), N, C, c.norm_eps);
        {
            const Input in = prepare(*p.wq, a.ln1.data(), N);
            linear_forward(*p.wq, a.q.data(), in, N);
            linear_forward(*p.wk, a.k.data(), in, N);
            linear_forward(*p.wv, a.v.data(), in, N);
        }
        rope_forward(a.q.data(), B, T, c.n_heads, D, acts.rope_cos.data(), acts.rope_sin.data());
        rope_forward(a.k.data(), B, T, c.n_kv_heads, D, acts.rope_cos.data(), acts.rope_sin.data());
        if (tensor_core_attention_) {
            attention_tc_forward(gemm_, a.att.data(), a.lse.data(), a.q.data(), a.k.data(), a.v.data(), B, T, c.n_heads,
                                 c.n_kv_heads, D);
        } else {
            attention_forward(a.att.data(), a.lse.data(), a.q.data(), a.k.data(), a.v.data(), B, T, c.n_heads,
                              c.n_kv_heads, D);
        }
        float* att_out = a.att.data();
        if (c.subln) {
            rmsnorm_forward(a.att_sub.data(), a.att_sub_rstd.data(), a.att.data(), model_.value(*p.attn_subnorm), N, C,
                            c.norm_eps);
            att_out = a.att_sub.data();
        }
        linear_forward(*p.wo, a.mid.data(), prepare(*p.wo, att_out, N), N);
        add_in_place(a.mid.data(), a.input.data(), static_cast<size_t>(N) * C);

        rmsnorm_forward(a.ln2.data(), a.ln2_rstd.data(), a.mid.data(), model_.value(*p.ffn_norm), N, C, c.norm_eps);
        {
            const Input in = prepare(*p.w_gate, a.ln2.data(), N);
            linear_forward(*p.w_gate, a.gate.data(), in, N);
            linear_forward(*p.w_up, a.up.data(), in, N);
        }
        swiglu_forward(a.h.data(), a.gate.data(), a.up.data(), static_cast<size_t>(N) * F);
        float* ffn_in = a.h.data();
        if (c.subln) {
            rmsnorm_forward(a.h_sub.data(), a.h_sub_rstd.data(), a.h.data(), model_.value(*p.ffn_subnorm), N, F,
                            c.norm_eps);
            ffn_in = a.h_sub.data();
        }
        linear_forward(*p.w_down, next, prepare(*p.w_down, ffn_in, N), N);
        add_in_place(next, a.mid.data(), static_cast<size_t>(N) * C);
    }
    rmsnorm_forward(acts.lnf.data(), acts.lnf_rstd.data(), acts.final_input.data(), model_.value(*w.output_norm), N, C,
                    c.norm_eps);
    linear_forward(*w.output, acts.logits.data(), prepare(*w.output, acts.lnf.data(), N), N);
    return cross_entropy_forward_backward(nullptr, acts.logits.data(), acts.targets.data(), N, c.vocab_size, 0.0f,
                                          acts.row_loss.data());
}

void TrainingPass::backward(DeviceActivations& acts, float grad_scale, float* gradients) {
    const ModelParameters& model = model_.host();
    const ModelConfig& c = model.config;
    const int B = acts.batch, T = acts.seq, N = B * T;
    const int C = c.dim, F = c.ffn_dim, V = c.vocab_size, D = c.head_dim();
    const ModelTensors& w = model.tensors;
    auto norm_backward = [&](const ParamTensor& gain, float* dx, const float* dout, const float* x, const float* rstd) {
        rmsnorm_backward(dx, gradients + gain.flat_offset, dout, x, model_.value(gain), rstd, N, gain.cols,
                         acts.norm_scratch.data());
    };

    float* dlogits = acts.logits.data();  // in place, as the CPU
    cross_entropy_forward_backward(dlogits, acts.logits.data(), acts.targets.data(), N, V, grad_scale,
                                   acts.row_loss.data());
    acts.d_c.zero();
    linear_backward(*w.output, acts.d_c.data(), dlogits, acts.lnf.data(), N, gradients);
    acts.d_residual.zero();
    norm_backward(*w.output_norm, acts.d_residual.data(), acts.d_c.data(), acts.final_input.data(), acts.lnf_rstd.data());

    for (int l = c.n_layers - 1; l >= 0; --l) {
        DeviceLayerActivations& a = acts.layers[l];
        const LayerTensors& p = w.layers[l];

        const float* ffn_in = c.subln ? a.h_sub.data() : a.h.data();
        acts.d_f.zero();
        linear_backward(*p.w_down, acts.d_f.data(), acts.d_residual.data(), ffn_in, N, gradients);
        float* d_h = acts.d_f.data();
        if (c.subln) {
            acts.d_gate.zero();  // borrowed as dL/dh
            norm_backward(*p.ffn_subnorm, acts.d_gate.data(), acts.d_f.data(), a.h.data(), a.h_sub_rstd.data());
            copy_on_device(acts.d_f.data(), acts.d_gate.data(), acts.d_f.bytes());
        }
        acts.d_gate.zero();
        acts.d_up.zero();
        swiglu_backward(acts.d_gate.data(), acts.d_up.data(), d_h, a.gate.data(), a.up.data(), static_cast<size_t>(N) * F);
        acts.d_c.zero();
        linear_backward(*p.w_gate, acts.d_c.data(), acts.d_gate.data(), a.ln2.data(), N, gradients);
        linear_backward(*p.w_up, acts.d_c.data(), acts.d_up.data(), a.ln2.data(), N, gradients);
        norm_backward(*p.ffn_norm, acts.d_residual.data(), acts.d_c.data(), a.mid.data(), a.ln2_rstd.data());

        const float* att_out = c.subln ? a.att_sub.data() : a.att.data();
        acts.d_c.zero();
        linear_backward(*p.wo, acts.d_c.data(), acts.d_residual.data(), att_out, N, gradients);
        float* d_att = acts.d_c.data();
        if (c.subln) {
            acts.d_c2.zero();
            norm_backward(*p.attn_subnorm, acts.d_c2.data(), acts.d_c.data(), a.att.data(), a.att_sub_rstd.data());
            d_att = acts.d_c2.data();
        }
        acts.d_q.zero();
        acts.d_k.zero();
        acts.d_v.zero();
        if (tensor_core_attention_) {
            attention_tc_backward(gemm_, acts.d_q.data(), acts.d_k.data(), acts.d_v.data(), d_att, a.lse.data(),
                                  a.q.data(), a.k.data(), a.v.data(), B, T, c.n_heads, c.n_kv_heads, D);
        } else {
            attention_backward(acts.d_q.data(), acts.d_k.data(), acts.d_v.data(), d_att, a.att.data(), a.lse.data(),
                               a.q.data(), a.k.data(), a.v.data(), B, T, c.n_heads, c.n_kv_heads, D, acts.delta.data());
        }
        rope_backward(acts.d_q.data(), B, T, c.n_heads, D, acts.rope_cos.data(), acts.rope_sin.data());
        rope_backward(acts.d_k.data(), B, T, c.n_kv_heads, D, acts.rope_cos.data(), acts.rope_sin.data());
        float* d_ln1 = c.subln ? acts.d_c.data() : acts.d_c2.data();  // whichever is free now
        zero_on_device(d_ln1, static_cast<size_t>(N) * C * sizeof(float));
        linear_backward(*p.wq, d_ln1, acts.d_q.data(), a.ln1.data(), N, gradients);
        linear_backward(*p.wk, d_ln1, acts.d_k.data(), a.ln1.data(), N, gradients);
        linear_backward(*p.wv, d_ln1, acts.d_v.data(), a.ln1.data(), N, gradients);
        norm_backward(*p.attn_norm, acts.d_residual.data(), d_ln1, a.input.data(), a.ln1_rstd.data());
    }
    const DeviceTokenGroups groups{acts.group_tokens.data(), acts.group_starts.data(), acts.group_positions.data(),
                                   acts.distinct_tokens};
    embedding_backward(gradients + w.token_embd->flat_offset, acts.d_residual.data(), groups, C);
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
