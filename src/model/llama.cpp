#include "model/llama.h"

#include <algorithm>
#include <cstring>

#include "kernels/attention.h"
#include "kernels/cross_entropy.h"
#include "kernels/embedding.h"
#include "kernels/rmsnorm.h"
#include "kernels/rope.h"
#include "kernels/swiglu.h"
#include "model/layer_values.h"
#include "model/decoder_block.h"
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
        a.values[BlockValue::input] = Array<float>(act, N * C);
        allocate_layer_values(a, c, N, [act](size_t count) { return Array<float>(act, count); });
        a.probs = Array<float>(act, static_cast<size_t>(batch) * H * seq * seq);
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

namespace {

// The backward of one use of a parameter, piece by piece (ParamTensor::piece_rows).
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
        for (int row_begin = 0; row_begin < tensor.rows; row_begin += tensor.piece_rows) {
            const int row_end = std::min(tensor.rows, row_begin + tensor.piece_rows);
            float* g = sink_.acquire(tensor, row_begin, row_end);
            accumulate(g, row_begin, row_end);
            sink_.release(tensor, row_begin, row_end);
        }
    }

    ModelParameters& model_;
    GradientSink& sink_;
    int N_;
};

// The training executor of the decoder block (model/decoder_block.h) for one layer: forward
// saves every value in the layer's activations, backward takes the steps in reverse.
class TrainingLayer {
public:
    TrainingLayer(const ModelParameters& model, Activations& acts, int layer)
        : model_(model), c_(model.config), acts_(acts), a_(acts.layers[static_cast<size_t>(layer)]),
          p_(model.tensors.layers[static_cast<size_t>(layer)]), layer_(layer), N_(acts.batch * acts.seq) {}

    void forward(const BlockStep& step) {
        const int B = acts_.batch, T = acts_.seq, D = c_.head_dim();
        const SavedValue in = saved(step.in), out = saved(step.out);
        switch (step.op) {
            case BlockOp::rmsnorm:
                rmsnorm_forward(out.rows, out.rstd, in.rows, model_.value(*gain(step)), N_, cols(step.in),
                                c_.norm_eps);
                return;
            case BlockOp::attention: {
                const LinearInput input(model_, *linear(step, 0), in.rows, N_);  // q, k, v share one input
                weight_linear_forward(model_, *linear(step, 0), a_.q.data(), input, N_);
                weight_linear_forward(model_, *linear(step, 1), a_.k.data(), input, N_);
                weight_linear_forward(model_, *linear(step, 2), a_.v.data(), input, N_);
                rope_forward(a_.q.data(), B, T, c_.n_heads, D, 0, c_.rope_theta);
                rope_forward(a_.k.data(), B, T, c_.n_kv_heads, D, 0, c_.rope_theta);
                attention_forward(out.rows, a_.probs.data(), a_.q.data(), a_.k.data(), a_.v.data(), B, T, c_.n_heads,
                                  c_.n_kv_heads, D);
                return;
            }
            case BlockOp::gated_linears: {
                const LinearInput input(model_, *linear(step, 0), in.rows, N_);
                weight_linear_forward(model_, *linear(step, 0), a_.gate.data(), input, N_);
                weight_linear_forward(model_, *linear(step, 1), a_.up.data(), input, N_);
                gated_forward(c_.ffn_activation, out.rows, a_.gate.data(), a_.up.data(), count(step.out));
                return;
            }
            case BlockOp::residual_linear:
                weight_linear_forward(model_, *linear(step, 0), out.rows, LinearInput(model_, *linear(step, 0), in.rows, N_),
                                      N_);
                add_in_place(out.rows, saved(step.residual).rows, count(step.out));
                return;
        }
    }

    // The gradient of step.out is in gradient(step.out); this adds the step's part to
    // gradient(step.in) and hands its weights' gradients to the pass.
    void backward(const BlockStep& step, BackwardPass& pass) {
        const int B = acts_.batch, T = acts_.seq, D = c_.head_dim();
        const SavedValue in = saved(step.in), out = saved(step.out);
        float* d_in = gradient(step.in);
        float* d_out = gradient(step.out);
        // A stream value's gradient already holds what flows along the stream: it accumulates.
        if (!on_residual_stream(step.in)) std::memset(d_in, 0, count(step.in) * sizeof(float));
        switch (step.op) {
            case BlockOp::rmsnorm:
                pass.rmsnorm(*gain(step), d_in, d_out, in.rows, out.rstd);
                return;
            case BlockOp::attention:
                zero(acts_.d_q);
                zero(acts_.d_k);
                zero(acts_.d_v);
                attention_backward(acts_.d_q.data(), acts_.d_k.data(), acts_.d_v.data(), acts_.d_attention.data(), d_out,
                                   a_.q.data(), a_.k.data(), a_.v.data(), a_.probs.data(), B, T, c_.n_heads,
                                   c_.n_kv_heads, D);
                rope_backward(acts_.d_q.data(), B, T, c_.n_heads, D, 0, c_.rope_theta);
                rope_backward(acts_.d_k.data(), B, T, c_.n_kv_heads, D, 0, c_.rope_theta);
                pass.linear(*linear(step, 0), d_in, acts_.d_q.data(), in.rows);
                pass.linear(*linear(step, 1), d_in, acts_.d_k.data(), in.rows);
                pass.linear(*linear(step, 2), d_in, acts_.d_v.data(), in.rows);
                return;
            case BlockOp::gated_linears:
                zero(acts_.d_gate);
                zero(acts_.d_up);
                gated_backward(c_.ffn_activation, acts_.d_gate.data(), acts_.d_up.data(), d_out, a_.gate.data(),
                               a_.up.data(), count(step.out));
                pass.linear(*linear(step, 0), d_in, acts_.d_gate.data(), in.rows);
                pass.linear(*linear(step, 1), d_in, acts_.d_up.data(), in.rows);
                return;
            case BlockOp::residual_linear:
                // d residual += d out: both are the stream's one gradient, so nothing to add.
                pass.linear(*linear(step, 0), d_in, d_out, in.rows);
                return;
        }
    }

private:
    SavedValue saved(BlockValue value) const { return saved_value(acts_, layer_, value); }
    float* gradient(BlockValue value) const { return value_gradient(acts_, value); }
    const ParamTensor* gain(const BlockStep& step) const { return layer_gain(p_, step.weights[0]); }
    const ParamTensor* linear(const BlockStep& step, int i) const {
        return layer_linear(p_, step.weights[static_cast<size_t>(i)]);
    }
    int cols(BlockValue value) const { return block_value_cols(value, c_); }
    size_t count(BlockValue value) const { return static_cast<size_t>(N_) * cols(value); }

    const ModelParameters& model_;
    const ModelConfig& c_;
    Activations& acts_;
    LayerActivations& a_;
    const LayerTensors& p_;
    int layer_, N_;
};

}  // namespace

double model_forward(const ModelParameters& model, Activations& acts, bool with_targets) {
    const ModelConfig& c = model.config;
    const int N = acts.batch * acts.seq, C = c.dim;
    const ModelTensors& w = model.tensors;

    float* residual = acts.layers.empty() ? acts.final_input.data() : acts.layers[0].values[BlockValue::input].data();
    weight_embedding_forward(model, *w.token_embd, residual, acts.tokens.data(), N);
    const std::vector<BlockStep> block = decoder_block_steps(c);
    for (int l = 0; l < c.n_layers; ++l) {
        TrainingLayer layer(model, acts, l);
        for (const BlockStep& step : block) layer.forward(step);
    }

    rmsnorm_forward(acts.lnf.data(), acts.lnf_rstd.data(), acts.final_input.data(), model.value(*w.output_norm), N, C,
                    c.norm_eps);
    weight_linear_forward(model, *w.output, acts.logits.data(), LinearInput(model, *w.output, acts.lnf.data(), N), N);
    if (!with_targets) return 0.0;
    return cross_entropy_forward_backward(nullptr, acts.logits.data(), acts.targets.data(), N, c.vocab_size, 0.0f);
}

void model_backward(ModelParameters& model, Activations& acts, float grad_scale, GradientSink& sink) {
    const ModelConfig& c = model.config;
    const int N = acts.batch * acts.seq, V = c.vocab_size;
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

    const std::vector<BlockStep> block = decoder_block_steps(c);
    for (int l = c.n_layers - 1; l >= 0; --l) {
        TrainingLayer layer(model, acts, l);
        for (auto step = block.rbegin(); step != block.rend(); ++step) layer.backward(*step, pass);
    }

    pass.embedding(*w.token_embd, acts.d_residual.data(), acts.tokens.data());
}

}  // namespace dqt
