#include "infer/session.h"

#include <omp.h>

#include <algorithm>
#include <string>

#include "core/error.h"
#include "kernels/attention.h"
#include "kernels/linear.h"
#include "kernels/rmsnorm.h"
#include "kernels/rope.h"
#include "kernels/swiglu.h"

namespace dqt {

namespace {

// Rows of a thread's share of `total` weight rows are cut at multiples of this (whole tiles of
// every kernel).
constexpr int kShareAlign = 16;

int share_begin(int total, int threads, int thread) {
    if (thread >= threads) return total;
    const int64_t begin = static_cast<int64_t>(total) * thread / threads;
    return static_cast<int>(begin / kShareAlign * kShareAlign);
}

// Decode-sized work (one row) runs on the calling thread: waking the team costs more than it.
constexpr size_t kSerialElements = 16384;

void add_rows(float* x, const float* y, size_t count) {
#pragma omp parallel for schedule(static) if (count > kSerialElements)
    for (size_t i = 0; i < count; ++i) x[i] += y[i];
}

}  // namespace

const char* kv_cache_type_name(KvCacheType type) { return type == KvCacheType::f16 ? "f16" : "f32"; }

KvCacheType parse_kv_cache_type(const std::string& name) {
    if (name == "f32") return KvCacheType::f32;
    if (name == "f16") return KvCacheType::f16;
    throw Error("unknown KV cache type '" + name + "' (known: f32, f16)");
}

KvCache::KvCache(const ModelConfig& c, int max_seq_len, KvCacheType cache_type)
    : type(cache_type), max_seq(max_seq_len), key_stride(attention_key_stride(max_seq_len)) {
    const size_t key_count = static_cast<size_t>(key_stride) * c.kv_dim();
    const size_t value_count = static_cast<size_t>(max_seq) * c.kv_dim() + attention_value_slack();
    for (int l = 0; l < c.n_layers; ++l) {
        if (type == KvCacheType::f32) {
            keys.emplace_back(MemCategory::activations, key_count);
            values.emplace_back(MemCategory::activations, value_count);
        } else {
            keys_f16.emplace_back(MemCategory::activations, key_count);
            values_f16.emplace_back(MemCategory::activations, value_count);
        }
    }
}

size_t KvCache::bytes() const {
    size_t total = 0;
    for (size_t l = 0; l < keys.size(); ++l) total += keys[l].bytes() + values[l].bytes();
    for (size_t l = 0; l < keys_f16.size(); ++l) total += keys_f16[l].bytes() + values_f16[l].bytes();
    return total;
}

InferenceSession::InferenceSession(const InferenceModel& model, int max_seq, KvCacheType cache_type)
    : model_(model),
      cache_(model.config, max_seq, cache_type),
      rope_(max_seq, model.config.head_dim(), 0, model.config.rope_theta) {
    require(max_seq > 0 && max_seq <= model.config.seq_len,
            "a sequence of " + std::to_string(max_seq) + " tokens does not fit the model's context of " +
                std::to_string(model.config.seq_len));
}

void InferenceSession::reserve(int n) {
    if (n <= capacity_) return;
    const ModelConfig& c = model_.config;
    const size_t N = static_cast<size_t>(n), C = c.dim, F = c.ffn_dim, V = c.vocab_size;
    const MemCategory s = MemCategory::scratch;
    x_ = Array<float>(s, N * C);
    normed_ = Array<float>(s, N * C);
    q_ = Array<float>(s, N * C);
    k_ = Array<float>(s, N * c.kv_dim());
    v_ = Array<float>(s, N * c.kv_dim());
    att_ = Array<float>(s, N * C);
    att_sub_ = c.subln ? Array<float>(s, N * C) : Array<float>();
    proj_ = Array<float>(s, N * C);
    gate_ = Array<float>(s, N * F);
    up_ = Array<float>(s, N * F);
    h_ = Array<float>(s, N * F);
    h_sub_ = c.subln ? Array<float>(s, N * F) : Array<float>();
    rstd_ = Array<float>(s, N);
    logits_ = Array<float>(s, N * V);
    capacity_ = n;
}

void InferenceSession::run_linears(std::initializer_list<LinearJob> jobs, const float* x, int n) {
    const InferenceLinear& first = *jobs.begin()->weight;
    const int cols = first.cols;
    int total_rows = 0;
    for (const LinearJob& job : jobs) {
        if (job.weight->quantized() != first.quantized() || job.weight->cols != cols)
            throw Error("inference: linears sharing an input must all be dense or all quantized, of equal widths");
        total_rows += job.weight->rows;
    }
    if (!first.quantized()) {
        for (const LinearJob& job : jobs) linear_forward(job.out, x, job.weight->dense, n, cols, job.weight->rows);
        return;
    }
    quantized_.reshape(n, cols);
    const IntegerIsa isa = best_integer_isa();
    // One parallel region: the input rows are quantized, then every thread runs a contiguous
    // share of all the jobs' weight rows (decode streams each weight byte exactly once).
#pragma omp parallel
    {
#pragma omp for schedule(static)
        for (int r = 0; r < n; ++r)
            quantized_.scales[static_cast<size_t>(r)] =
                quantize_row_int8(x + static_cast<size_t>(r) * cols, cols, quantized_.mutable_row(r),
                                  &quantized_.sums[static_cast<size_t>(r)]);
        const int threads = omp_get_num_threads(), thread = omp_get_thread_num();
        const int begin = share_begin(total_rows, threads, thread), end = share_begin(total_rows, threads, thread + 1);
        int offset = 0;
        for (const LinearJob& job : jobs) {
            const InferenceLinear& w = *job.weight;
            const int first_row = std::max(begin - offset, 0), last_row = std::min(end - offset, w.rows);
            if (first_row < last_row) {
                if (w.format == LinearFormat::ternary) {
                    ternary_matmul_rows(w.ternary, quantized_, job.out, first_row, last_row, isa);
                } else {
                    int8_matmul_rows(w.int8, quantized_, job.out, first_row, last_row, isa);
                }
            }
            offset += w.rows;
        }
    }
}

void InferenceSession::store_keys_and_values(int layer, int n) {
    const ModelConfig& c = model_.config;
    const size_t l = static_cast<size_t>(layer);
    if (cache_.type == KvCacheType::f32) {
        dqt::store_keys_and_values(cache_.keys[l].data(), cache_.key_stride, cache_.values[l].data(), cache_.max_seq,
                                   k_.data(), v_.data(), cache_.length, n, c.n_kv_heads, c.head_dim());
        return;
    }
    dqt::store_keys_and_values(cache_.keys_f16[l].data(), cache_.key_stride, cache_.values_f16[l].data(),
                               cache_.max_seq, k_.data(), v_.data(), cache_.length, n, c.n_kv_heads, c.head_dim());
    // What attends below is what the cache holds.
    round_to_f16_in_place(k_.data(), static_cast<size_t>(n) * c.kv_dim());
    round_to_f16_in_place(v_.data(), static_cast<size_t>(n) * c.kv_dim());
}

void InferenceSession::attention(int layer, int n) {
    const ModelConfig& c = model_.config;
    const int pos = cache_.length, C = c.dim;
    const size_t l = static_cast<size_t>(layer);
    if (pos == 0) {
        // The training forward's attention over the n new rows (B = 1, T = n).
        attention_forward(att_.data(), nullptr, q_.data(), k_.data(), v_.data(), 1, n, c.n_heads, c.n_kv_heads,
                          c.head_dim());
        return;
    }
    for (int i = 0; i < n; ++i) {
        float* out = att_.data() + static_cast<size_t>(i) * C;
        const float* q = q_.data() + static_cast<size_t>(i) * C;
        if (cache_.type == KvCacheType::f32) {
            attention_decode(out, q, cache_.keys[l].data(), cache_.key_stride, cache_.values[l].data(), cache_.max_seq,
                             pos + i, c.n_heads, c.n_kv_heads, c.head_dim());
        } else {
            attention_decode(out, q, cache_.keys_f16[l].data(), cache_.key_stride, cache_.values_f16[l].data(),
                             cache_.max_seq, pos + i, c.n_heads, c.n_kv_heads, c.head_dim());
        }
    }
}

const float* InferenceSession::run(const int32_t* tokens, int n, LogitRows rows) {
    const ModelConfig& c = model_.config;
    if (n <= 0) throw Error("inference: no tokens to run");
    if (n > cache_.max_seq - cache_.length)
        throw Error(std::to_string(cache_.length + n) + " tokens do not fit the context of " +
                    std::to_string(cache_.max_seq));
    for (int i = 0; i < n; ++i)
        if (tokens[i] < 0 || tokens[i] >= c.vocab_size)
            throw Error("token id " + std::to_string(tokens[i]) + " is outside the vocabulary of " +
                        std::to_string(c.vocab_size));
    reserve(n);
    const int pos = cache_.length, C = c.dim, F = c.ffn_dim;
    const size_t NC = static_cast<size_t>(n) * C, NF = static_cast<size_t>(n) * F;

    model_.embedding.lookup(tokens, n, x_.data());
    for (int l = 0; l < c.n_layers; ++l) {
        const InferenceLayer& w = model_.layers[static_cast<size_t>(l)];

        // Attention block: x + Wo · SubLN(Attn(RoPE(Wq·n), RoPE(Wk·n), Wv·n)), n = RMSNorm(x).
        rmsnorm_forward(normed_.data(), rstd_.data(), x_.data(), w.attn_norm, n, C, c.norm_eps);
        run_linears({{&w.wq, q_.data()}, {&w.wk, k_.data()}, {&w.wv, v_.data()}}, normed_.data(), n);
        rope_forward(q_.data(), n, c.n_heads, rope_, pos);
        rope_forward(k_.data(), n, c.n_kv_heads, rope_, pos);
        store_keys_and_values(l, n);
        attention(l, n);
        const float* att_out = att_.data();
        if (c.subln) {
            rmsnorm_forward(att_sub_.data(), rstd_.data(), att_.data(), w.attn_subnorm, n, C, c.norm_eps);
            att_out = att_sub_.data();
        }
        run_linears({{&w.wo, proj_.data()}}, att_out, n);
        add_rows(x_.data(), proj_.data(), NC);

        // Feed-forward block: x + Wdown · SubLN(silu(Wgate·n) * (Wup·n)), n = RMSNorm(x).
        rmsnorm_forward(normed_.data(), rstd_.data(), x_.data(), w.ffn_norm, n, C, c.norm_eps);
        run_linears({{&w.w_gate, gate_.data()}, {&w.w_up, up_.data()}}, normed_.data(), n);
        swiglu_forward(h_.data(), gate_.data(), up_.data(), NF);
        const float* ffn_in = h_.data();
        if (c.subln) {
            rmsnorm_forward(h_sub_.data(), rstd_.data(), h_.data(), w.ffn_subnorm, n, F, c.norm_eps);
            ffn_in = h_sub_.data();
        }
        run_linears({{&w.w_down, proj_.data()}}, ffn_in, n);
        add_rows(x_.data(), proj_.data(), NC);
    }
    cache_.length = pos + n;

    // Only the rows whose logits are wanted go through the final norm and the head.
    const int first = rows == LogitRows::all ? 0 : n - 1, count = n - first;
    const float* x_first = x_.data() + static_cast<size_t>(first) * C;
    rmsnorm_forward(normed_.data(), rstd_.data(), x_first, model_.output_norm, count, C, c.norm_eps);
    run_linears({{&model_.head, logits_.data()}}, normed_.data(), count);
    return logits_.data();
}

}  // namespace dqt
