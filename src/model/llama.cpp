#include "model/llama.h"

#include <algorithm>
#include <cstring>

#include "kernels/attention.h"
#include "kernels/cross_entropy.h"
#include "kernels/embedding.h"
#include "kernels/rmsnorm.h"
#include "kernels/rope.h"
#include "kernels/swiglu.h"
#include "model/weight_access.h"

namespace dqt {

namespace {

void zero(const Array<float>& array) { std::memset(array.data(), 0, array.bytes()); }

void add_in_place(float* out, const float* in, size_t count) {
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < count; ++i) out[i] += in[i];
}

}  // namespace

Activations::Activations(const ModelConfig& c, int batch_size, int seq_len) : batch(batch_size), seq(seq_len) {
    const size_t N = static_cast<size_t>(batch) * seq;  // tokens
    const size_t C = c.dim, F = c.ffn_dim, V = c.vocab_size, KV = c.kv_dim(), H = c.n_heads;
    const MemCategory act = MemCategory::activations;
    layers.resize(c.n_layers);
    for (LayerActivations& a : layers) {
        a.input = Array<float>(act, N * C);
        a.ln1 = Array<float>(act, N * C);
        a.ln1_rstd = Array<float>(act, N);
        a.q = Array<float>(act, N * C);
        a.k = Array<float>(act, N * KV);
        a.v = Array<float>(act, N * KV);
        a.probs = Array<float>(act, static_cast<size_t>(batch) * H * seq * seq);
        a.att = Array<float>(act, N * C);
        if (c.subln) {
            a.att_sub = Array<float>(act, N * C);
            a.att_sub_rstd = Array<float>(act, N);
            a.h_sub = Array<float>(act, N * F);
            a.h_sub_rstd = Array<float>(act, N);
        }
        a.mid = Array<float>(act, N * C);
        a.ln2 = Array<float>(act, N * C);
        a.ln2_rstd = Array<float>(act, N);
        a.gate = Array<float>(act, N * F);
        a.up = Array<float>(act, N * F);
        a.h = Array<float>(act, N * F);
    }
    final_input = Array<float>(act, N * C);
    lnf = Array<float>(act, N * C);
    lnf_rstd = Array<float>(act, N);
    logits = Array<float>(act, N * V);
    tokens = Array<int32_t>(act, N);
    targets = Array<int32_t>(act, N);

    const MemCategory scratch = MemCategory::scratch;
    d_residual = Array<float>(scratch, N * C);
    d_c = Array<float>(scratch, N * C);
    d_c2 = Array<float>(scratch, N * C);
    d_q = Array<float>(scratch, N * C);
    d_k = Array<float>(scratch, N * KV);
    d_v = Array<float>(scratch, N * KV);
    d_f = Array<float>(scratch, N * F);
    d_gate = Array<float>(scratch, N * F);
    d_up = Array<float>(scratch, N * F);
    d_attention = Array<float>(scratch, attention_backward_scratch_floats(batch, seq, c.n_heads));
}

double model_forward(const ModelParameters& model, Activations& acts, bool with_targets) {
    const ModelConfig& c = model.config;
    const int B = acts.batch, T = acts.seq, N = B * T;
    const int C = c.dim, F = c.ffn_dim, D = c.head_dim();
    const ModelTensors& w = model.tensors;
    auto value = [&](const ParamTensor* tensor) { return model.value(*tensor); };

    float* residual = acts.layers.empty() ? acts.final_input.data() : acts.layers[0].input.data();
    weight_embedding_forward(model, *w.token_embd, residual, acts.tokens.data(), N);

    for (int l = 0; l < c.n_layers; ++l) {
        LayerActivations& a = acts.layers[l];
        const LayerTensors& p = w.layers[l];
        float* next = (l + 1 < c.n_layers) ? acts.layers[l + 1].input.data() : acts.final_input.data();

        // Attention block: x + Wo · SubLN(Attn(RoPE(Wq·n), RoPE(Wk·n), Wv·n)), n = RMSNorm(x).
        rmsnorm_forward(a.ln1.data(), a.ln1_rstd.data(), a.input.data(), value(p.attn_norm), N, C, c.norm_eps);
        {
            const LinearInput in(model, *p.wq, a.ln1.data(), N);  // q, k, v share one input and one method
            weight_linear_forward(model, *p.wq, a.q.data(), in, N);
            weight_linear_forward(model, *p.wk, a.k.data(), in, N);
            weight_linear_forward(model, *p.wv, a.v.data(), in, N);
        }
        rope_forward(a.q.data(), B, T, c.n_heads, D, 0, c.rope_theta);
        rope_forward(a.k.data(), B, T, c.n_kv_heads, D, 0, c.rope_theta);
        attention_forward(a.att.data(), a.probs.data(), a.q.data(), a.k.data(), a.v.data(), B, T, c.n_heads,
                          c.n_kv_heads, D);
        float* att_out = a.att.data();
        if (c.subln) {
            rmsnorm_forward(a.att_sub.data(), a.att_sub_rstd.data(), a.att.data(), value(p.attn_subnorm), N, C,
                            c.norm_eps);
            att_out = a.att_sub.data();
        }
        weight_linear_forward(model, *p.wo, a.mid.data(), LinearInput(model, *p.wo, att_out, N), N);
        add_in_place(a.mid.data(), a.input.data(), static_cast<size_t>(N) * C);

        // Feed-forward block: mid + Wdown · SubLN(silu(Wgate·n) * (Wup·n)), n = RMSNorm(mid).
        rmsnorm_forward(a.ln2.data(), a.ln2_rstd.data(), a.mid.data(), value(p.ffn_norm), N, C, c.norm_eps);
        {
            const LinearInput in(model, *p.w_gate, a.ln2.data(), N);
            weight_linear_forward(model, *p.w_gate, a.gate.data(), in, N);
            weight_linear_forward(model, *p.w_up, a.up.data(), in, N);
        }
        gated_forward(c.ffn_activation, a.h.data(), a.gate.data(), a.up.data(), static_cast<size_t>(N) * F);
        float* ffn_in = a.h.data();
        if (c.subln) {
            rmsnorm_forward(a.h_sub.data(), a.h_sub_rstd.data(), a.h.data(), value(p.ffn_subnorm), N, F, c.norm_eps);
            ffn_in = a.h_sub.data();
        }
        weight_linear_forward(model, *p.w_down, next, LinearInput(model, *p.w_down, ffn_in, N), N);
        add_in_place(next, a.mid.data(), static_cast<size_t>(N) * C);
    }

    rmsnorm_forward(acts.lnf.data(), acts.lnf_rstd.data(), acts.final_input.data(), value(w.output_norm), N, C,
                    c.norm_eps);
    weight_linear_forward(model, *w.output, acts.logits.data(), LinearInput(model, *w.output, acts.lnf.data(), N), N);
    if (!with_targets) return 0.0;
    return cross_entropy_forward_backward(nullptr, acts.logits.data(), acts.targets.data(), N, c.vocab_size, 0.0f);
}

namespace {

// The backward of one use of a parameter, piece by piece as gradient_piece_rows says.
class BackwardPass {
public:
    BackwardPass(ModelParameters& model, GradientSink& sink, int tokens) : model_(model), sink_(sink), N_(tokens) {}

    // din (N, cols) += dout · W (skipped if null), then the weight's gradient. The input
    // gradient is computed first: a fused sink may change the weight when a piece is released.
    void linear(const ParamTensor& weight, float* din, const float* dout, const float* in) {
        if (din) weight_linear_backward_input(model_, weight, din, dout, N_);
        for_each_piece(weight, [&](float* g, int row_begin, int row_end) {
            weight_linear_backward_weight(model_, weight, g, dout, in, N_, row_begin, row_end);
        });
    }

    // dx (N, cols) += RMSNorm backward; the gain's gradient is one piece.
    void rmsnorm(const ParamTensor& gain, float* dx, const float* dout, const float* x, const float* rstd) {
        float* g = sink_.acquire(gain, 0, 1);
        rmsnorm_backward(dx, g, dout, x, model_.value(gain), rstd, N_, gain.cols);
        sink_.release(gain, 0, 1);
    }

    void embedding(const ParamTensor& table, const float* dout, const int32_t* tokens) {
        for_each_piece(table, [&](float* g, int row_begin, int row_end) {
            embedding_backward_rows(g, dout, tokens, N_, table.cols, row_begin, row_end);
        });
    }

private:
    template <typename Accumulate>
    void for_each_piece(const ParamTensor& tensor, Accumulate&& accumulate) {
        const int piece = gradient_piece_rows(model_.layout, tensor);
        for (int row_begin = 0; row_begin < tensor.rows; row_begin += piece) {
            const int row_end = std::min(tensor.rows, row_begin + piece);
            float* g = sink_.acquire(tensor, row_begin, row_end);
            accumulate(g, row_begin, row_end);
            sink_.release(tensor, row_begin, row_end);
        }
    }

    ModelParameters& model_;
    GradientSink& sink_;
    int N_;
};

}  // namespace

void model_backward(ModelParameters& model, Activations& acts, float grad_scale, GradientSink& sink) {
    const ModelConfig& c = model.config;
    const int B = acts.batch, T = acts.seq, N = B * T;
    const int C = c.dim, F = c.ffn_dim, V = c.vocab_size, D = c.head_dim();
    const ModelTensors& w = model.tensors;
    BackwardPass pass(model, sink, N);

    // dlogits overwrite the logits in place: row by row, softmax reads a row before writing it.
    float* dlogits = acts.logits.data();  // (B, T, V)
    cross_entropy_forward_backward(dlogits, acts.logits.data(), acts.targets.data(), N, V, grad_scale);

    // Head and final norm: d_residual = dL/d final_input.
    zero(acts.d_c);
    pass.linear(*w.output, acts.d_c.data(), dlogits, acts.lnf.data());
    zero(acts.d_residual);
    pass.rmsnorm(*w.output_norm, acts.d_residual.data(), acts.d_c.data(), acts.final_input.data(),
                 acts.lnf_rstd.data());

    for (int l = c.n_layers - 1; l >= 0; --l) {
        LayerActivations& a = acts.layers[l];
        const LayerTensors& p = w.layers[l];

        // Feed-forward block. d_residual carries dL/d(next) and becomes dL/d(mid).
        const float* ffn_in = c.subln ? a.h_sub.data() : a.h.data();
        zero(acts.d_f);
        pass.linear(*p.w_down, acts.d_f.data(), acts.d_residual.data(), ffn_in);
        const float* d_h = acts.d_f.data();
        if (c.subln) {
            zero(acts.d_gate);  // borrowed as dL/dh
            pass.rmsnorm(*p.ffn_subnorm, acts.d_gate.data(), acts.d_f.data(), a.h.data(), a.h_sub_rstd.data());
            std::memcpy(acts.d_f.data(), acts.d_gate.data(), acts.d_f.bytes());
            d_h = acts.d_f.data();
        }
        zero(acts.d_gate);
        zero(acts.d_up);
        gated_backward(c.ffn_activation, acts.d_gate.data(), acts.d_up.data(), d_h, a.gate.data(), a.up.data(),
                        static_cast<size_t>(N) * F);
        zero(acts.d_c);
        pass.linear(*p.w_gate, acts.d_c.data(), acts.d_gate.data(), a.ln2.data());
        pass.linear(*p.w_up, acts.d_c.data(), acts.d_up.data(), a.ln2.data());
        pass.rmsnorm(*p.ffn_norm, acts.d_residual.data(), acts.d_c.data(), a.mid.data(), a.ln2_rstd.data());

        // Attention block. d_residual becomes dL/d(input).
        const float* att_out = c.subln ? a.att_sub.data() : a.att.data();
        zero(acts.d_c);
        pass.linear(*p.wo, acts.d_c.data(), acts.d_residual.data(), att_out);
        float* d_att = acts.d_c.data();
        if (c.subln) {
            zero(acts.d_c2);
            pass.rmsnorm(*p.attn_subnorm, acts.d_c2.data(), acts.d_c.data(), a.att.data(), a.att_sub_rstd.data());
            d_att = acts.d_c2.data();
        }
        zero(acts.d_q);
        zero(acts.d_k);
        zero(acts.d_v);
        attention_backward(acts.d_q.data(), acts.d_k.data(), acts.d_v.data(), acts.d_attention.data(), d_att,
                           a.q.data(), a.k.data(), a.v.data(), a.probs.data(), B, T, c.n_heads, c.n_kv_heads, D);
        rope_backward(acts.d_q.data(), B, T, c.n_heads, D, 0, c.rope_theta);
        rope_backward(acts.d_k.data(), B, T, c.n_kv_heads, D, 0, c.rope_theta);
        float* d_ln1 = c.subln ? acts.d_c.data() : acts.d_c2.data();  // whichever is free now
        std::memset(d_ln1, 0, static_cast<size_t>(N) * C * sizeof(float));
        pass.linear(*p.wq, d_ln1, acts.d_q.data(), a.ln1.data());
        pass.linear(*p.wk, d_ln1, acts.d_k.data(), a.ln1.data());
        pass.linear(*p.wv, d_ln1, acts.d_v.data(), a.ln1.data());
        pass.rmsnorm(*p.attn_norm, acts.d_residual.data(), d_ln1, a.input.data(), a.ln1_rstd.data());
    }

    pass.embedding(*w.token_embd, acts.d_residual.data(), acts.tokens.data());
}

}  // namespace dqt
