#include "model/inference.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "core/error.h"
#include "kernels/attention.h"
#include "kernels/rmsnorm.h"
#include "kernels/rope.h"
#include "kernels/swiglu.h"
#include "model/llama.h"
#include "model/weight_access.h"

namespace dqt {

KvCache::KvCache(const ModelConfig& c, int max_seq_len) : max_seq(max_seq_len) {
    for (int l = 0; l < c.n_layers; ++l) {
        keys.emplace_back(MemCategory::activations, static_cast<size_t>(max_seq) * c.kv_dim());
        values.emplace_back(MemCategory::activations, static_cast<size_t>(max_seq) * c.kv_dim());
    }
}

DecodeScratch::DecodeScratch(const ModelConfig& c) {
    const MemCategory s = MemCategory::scratch;
    const size_t C = c.dim, F = c.ffn_dim;
    x = Array<float>(s, C);
    normed = Array<float>(s, C);
    q = Array<float>(s, C);
    att = Array<float>(s, C);
    att_sub = Array<float>(s, C);
    proj = Array<float>(s, C);
    gate = Array<float>(s, F);
    up = Array<float>(s, F);
    h = Array<float>(s, F);
    h_sub = Array<float>(s, F);
    rstd = Array<float>(s, 1);
    logits = Array<float>(s, c.vocab_size);
}

void decode_token(const ModelParameters& model, KvCache& cache, DecodeScratch& s, int32_t token) {
    const ModelConfig& c = model.config;
    require(cache.length < cache.max_seq, "context is full (" + std::to_string(cache.max_seq) + " tokens)");
    require(token >= 0 && token < c.vocab_size, "token id " + std::to_string(token) + " is outside the vocabulary");
    const int C = c.dim, F = c.ffn_dim, KV = c.kv_dim(), D = c.head_dim();
    const int pos = cache.length;
    const ModelTensors& w = model.tensors;
    auto value = [&](const ParamTensor* tensor) { return model.value(*tensor); };

    weight_embedding_forward(model, *w.token_embd, s.x.data(), &token, 1);
    for (int l = 0; l < c.n_layers; ++l) {
        const LayerTensors& p = w.layers[l];
        float* k_row = cache.keys[l].data() + static_cast<size_t>(pos) * KV;   // (Hkv, D)
        float* v_row = cache.values[l].data() + static_cast<size_t>(pos) * KV; // (Hkv, D)

        rmsnorm_forward(s.normed.data(), s.rstd.data(), s.x.data(), value(p.attn_norm), 1, C, c.norm_eps);
        prepare_linear_input(model, *p.wq, s.normed.data(), 1);
        weight_linear_forward(model, *p.wq, s.q.data(), s.normed.data(), 1);
        weight_linear_forward(model, *p.wk, k_row, s.normed.data(), 1);
        weight_linear_forward(model, *p.wv, v_row, s.normed.data(), 1);
        rope_forward(s.q.data(), 1, 1, c.n_heads, D, pos, c.rope_theta);
        rope_forward(k_row, 1, 1, c.n_kv_heads, D, pos, c.rope_theta);
        attention_decode(s.att.data(), s.q.data(), cache.keys[l].data(), cache.values[l].data(), pos, c.n_heads,
                         c.n_kv_heads, D);
        float* att_out = s.att.data();
        if (c.subln) {
            rmsnorm_forward(s.att_sub.data(), s.rstd.data(), s.att.data(), value(p.attn_subnorm), 1, C, c.norm_eps);
            att_out = s.att_sub.data();
        }
        prepare_linear_input(model, *p.wo, att_out, 1);
        weight_linear_forward(model, *p.wo, s.proj.data(), att_out, 1);
        for (int i = 0; i < C; ++i) s.x[i] += s.proj[i];

        rmsnorm_forward(s.normed.data(), s.rstd.data(), s.x.data(), value(p.ffn_norm), 1, C, c.norm_eps);
        prepare_linear_input(model, *p.w_gate, s.normed.data(), 1);
        weight_linear_forward(model, *p.w_gate, s.gate.data(), s.normed.data(), 1);
        weight_linear_forward(model, *p.w_up, s.up.data(), s.normed.data(), 1);
        swiglu_forward(s.h.data(), s.gate.data(), s.up.data(), F);
        float* ffn_in = s.h.data();
        if (c.subln) {
            rmsnorm_forward(s.h_sub.data(), s.rstd.data(), s.h.data(), value(p.ffn_subnorm), 1, F, c.norm_eps);
            ffn_in = s.h_sub.data();
        }
        prepare_linear_input(model, *p.w_down, ffn_in, 1);
        weight_linear_forward(model, *p.w_down, s.proj.data(), ffn_in, 1);
        for (int i = 0; i < C; ++i) s.x[i] += s.proj[i];
    }
    rmsnorm_forward(s.normed.data(), s.rstd.data(), s.x.data(), value(w.output_norm), 1, C, c.norm_eps);
    prepare_linear_input(model, *w.output, s.normed.data(), 1);
    weight_linear_forward(model, *w.output, s.logits.data(), s.normed.data(), 1);
    cache.length = pos + 1;
}

void prefill(const ModelParameters& model, KvCache& cache, DecodeScratch& scratch, const int32_t* tokens, int count) {
    const ModelConfig& c = model.config;
    require(cache.length == 0, "prefill needs an empty cache");
    require(count > 0 && count <= cache.max_seq, "prefill: " + std::to_string(count) + " tokens do not fit a context of " +
                                                      std::to_string(cache.max_seq));
    for (int t = 0; t < count; ++t)
        if (tokens[t] < 0 || tokens[t] >= c.vocab_size)
            throw Error("token id " + std::to_string(tokens[t]) + " is outside the vocabulary");
    Activations acts(c, 1, count);
    std::memcpy(acts.tokens.data(), tokens, static_cast<size_t>(count) * sizeof(int32_t));
    model_forward(model, acts, false);
    const size_t kv_values = static_cast<size_t>(count) * c.kv_dim();
    for (int l = 0; l < c.n_layers; ++l) {
        std::memcpy(cache.keys[l].data(), acts.layers[l].k.data(), kv_values * sizeof(float));
        std::memcpy(cache.values[l].data(), acts.layers[l].v.data(), kv_values * sizeof(float));
    }
    std::memcpy(scratch.logits.data(), acts.logits.data() + static_cast<size_t>(count - 1) * c.vocab_size,
                static_cast<size_t>(c.vocab_size) * sizeof(float));
    cache.length = count;
}

int32_t sample_token(const float* logits, int vocab, const SamplingOptions& options, float u) {
    if (options.temperature <= 0.0f) {
        return static_cast<int32_t>(std::max_element(logits, logits + vocab) - logits);
    }
    // Candidates by descending logit (ties by id, so the choice is deterministic).
    std::vector<int32_t> order(vocab);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
    int keep = vocab;
    if (options.top_k > 0) keep = std::min(keep, options.top_k);

    std::vector<double> probs(keep);
    const double top = logits[order[0]];
    double sum = 0.0;
    for (int i = 0; i < keep; ++i) {
        probs[i] = std::exp((logits[order[i]] - top) / options.temperature);
        sum += probs[i];
    }
    if (options.top_p < 1.0f) {
        // Smallest prefix whose probability mass reaches top_p.
        double mass = 0.0;
        int cut = keep;
        for (int i = 0; i < keep; ++i) {
            mass += probs[i] / sum;
            if (mass >= options.top_p) {
                cut = i + 1;
                break;
            }
        }
        keep = cut;
        sum = std::accumulate(probs.begin(), probs.begin() + keep, 0.0);
    }
    double threshold = u * sum;
    for (int i = 0; i < keep; ++i) {
        threshold -= probs[i];
        if (threshold < 0.0) return order[i];
    }
    return order[keep - 1];
}

}  // namespace dqt
