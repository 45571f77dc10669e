#include "infer/session.h"

#include <omp.h>

#include <algorithm>
#include <string>

#include "core/error.h"
#include "core/memory.h"
#include "kernels/attention.h"
#include "kernels/float16_widen.h"
#include "kernels/gemm.h"
#include "kernels/half_gemv.h"
#include "kernels/linear.h"
#include "kernels/rmsnorm.h"
#include "kernels/rope.h"
#include "kernels/swiglu.h"

namespace dqt {

namespace {

// Rows of a thread's share of `total` weight rows are cut at multiples of this (whole tiles of
// every kernel).
constexpr int kShareAlign = 16;

// From this many token rows per thread, the elementwise work is split over the threads rather
// than repeated by each: its cost then outweighs four more meetings per block.
constexpr int kSplitRowsPerThread = 2;

int share_begin(int total, int threads, int thread, int align) {
    if (thread >= threads) return total;
    const int64_t begin = static_cast<int64_t>(total) * thread / threads;
    return static_cast<int>(begin / align * align);
}

void add_rows(float* x, const float* y, size_t count) {
    for (size_t i = 0; i < count; ++i) x[i] += y[i];
}

}  // namespace

const char* kv_cache_type_name(KvCacheType type) {
    switch (type) {
        case KvCacheType::f16: return "f16";
        case KvCacheType::int8: return "int8";
        case KvCacheType::f32: break;
    }
    return "f32";
}

KvCacheType parse_kv_cache_type(const std::string& name) {
    for (const KvCacheType type : {KvCacheType::f32, KvCacheType::f16, KvCacheType::int8})
        if (name == kv_cache_type_name(type)) return type;
    throw Error("unknown KV cache type '" + name + "' (known: f32, f16, int8)");
}

namespace {

size_t kv_key_count(const ModelConfig& c, int max_seq) {
    return static_cast<size_t>(attention_key_stride(max_seq)) * c.kv_dim();
}
size_t kv_value_count(const ModelConfig& c, int max_seq) {
    return static_cast<size_t>(attention_value_stride(max_seq, c.head_dim())) * c.kv_dim();
}
double kv_element_bytes(KvCacheType type) {
    switch (type) {
        case KvCacheType::f16: return 2.0;
        case KvCacheType::int8: return 1.0;
        case KvCacheType::f32: break;
    }
    return 4.0;
}
// An int8 cache's scales: one per kv head and key or value row.
size_t kv_scale_count(const ModelConfig& c, int rows, KvCacheType type) {
    return type == KvCacheType::int8 ? static_cast<size_t>(rows) * c.n_kv_heads : 0;
}

}  // namespace

double kv_cache_bytes(const ModelConfig& c, int max_seq, KvCacheType type) {
    const size_t scales = kv_scale_count(c, attention_key_stride(max_seq), type) +
                          kv_scale_count(c, attention_value_stride(max_seq, c.head_dim()), type);
    return static_cast<double>(c.n_layers) *
           (static_cast<double>(kv_key_count(c, max_seq) + kv_value_count(c, max_seq)) * kv_element_bytes(type) +
            static_cast<double>(scales) * sizeof(float));
}

double kv_bytes_per_position(const ModelConfig& c, KvCacheType type) {
    // A key and a value, and their scales.
    return 2.0 * c.n_layers * (c.kv_dim() * kv_element_bytes(type) + kv_scale_count(c, 1, type) * sizeof(float));
}

KvCache::KvCache(const ModelConfig& c, int max_seq_len, KvCacheType cache_type)
    : type(cache_type),
      max_seq(max_seq_len),
      key_stride(attention_key_stride(max_seq_len)),
      value_stride(attention_value_stride(max_seq_len, c.head_dim())) {
    const size_t key_count = kv_key_count(c, max_seq), value_count = kv_value_count(c, max_seq);
    const double bytes = kv_cache_bytes(c, max_seq, type);
    require(bytes <= static_cast<double>(physical_memory_bytes()),
            "a KV cache of " + std::to_string(max_seq) + " positions for this model needs " +
                format_number(bytes / (1 << 30)) + " GiB, more than this machine's " +
                format_number(static_cast<double>(physical_memory_bytes()) / (1 << 30)) + " GiB of memory");
    const MemCategory category = MemCategory::activations;
    for (int l = 0; l < c.n_layers; ++l) {
        switch (type) {
            case KvCacheType::f32:
                keys.emplace_back(category, key_count);
                values.emplace_back(category, value_count);
                break;
            case KvCacheType::f16:
                keys_f16.emplace_back(category, key_count);
                values_f16.emplace_back(category, value_count);
                break;
            case KvCacheType::int8:
                keys_int8.emplace_back(category, key_count);
                values_int8.emplace_back(category, value_count);
                key_scales.emplace_back(category, kv_scale_count(c, key_stride, type));
                value_scales.emplace_back(category, kv_scale_count(c, value_stride, type));
                break;
        }
    }
}

size_t KvCache::bytes() const {
    size_t total = 0;
    const auto add = [&total](const auto& arrays) {
        for (const auto& array : arrays) total += array.bytes();
    };
    add(keys);
    add(values);
    add(keys_f16);
    add(values_f16);
    add(keys_int8);
    add(values_int8);
    add(key_scales);
    add(value_scales);
    return total;
}

InferenceSession::InferenceSession(const InferenceModel& model, int max_seq, KvCacheType cache_type)
    : model_(model),
      cache_(model.config, max_seq, cache_type),
      rope_(max_seq, model.config.head_dim(), 0, model.config.rope_theta),
      block_(decoder_block_steps(model.config)) {
    require(max_seq > 0 && max_seq <= model.config.seq_len,
            "a sequence of " + std::to_string(max_seq) + " tokens does not fit the model's context of " +
                std::to_string(model.config.seq_len));
}

void InferenceSession::reserve(int rows, int logit_rows) {
    require(rows >= 1 && logit_rows >= 1 && logit_rows <= rows, "inference: nothing to reserve scratch for");
    // A run's row scratch is one copy per thread below the split, the shared copy from it.
    const int team = std::max(1, omp_get_max_threads());
    const int split_from = kSplitRowsPerThread * team;
    reserve(std::min(rows, split_from - 1), logit_rows, team, false);
    if (rows >= split_from) reserve(rows, logit_rows, team, true);
}

void InferenceSession::reserve(int n, int head_rows, int team, bool split_rows) {
    const ModelConfig& c = model_.config;
    const MemCategory s = MemCategory::scratch;
    if (n > capacity_) {
        const size_t N = static_cast<size_t>(n), C = c.dim, F = c.ffn_dim;
        q_ = Array<float>(s, N * C);
        k_ = Array<float>(s, N * c.kv_dim());
        v_ = Array<float>(s, N * c.kv_dim());
        att_ = Array<float>(s, N * C);
        proj_ = Array<float>(s, N * C);
        gate_ = Array<float>(s, N * F);
        up_ = Array<float>(s, N * F);
        h_ = Array<float>(s, N * F);
        capacity_ = n;
    }
    if (head_rows > head_capacity_) {
        const size_t H = static_cast<size_t>(head_rows);
        normed_ = Array<float>(s, H * c.dim);
        rstd_ = Array<float>(s, H);
        logits_ = Array<float>(s, H * c.vocab_size);
        if (model_.head.quantized()) quantized_.reshape(head_rows, c.dim);
        head_capacity_ = head_rows;
    }
    // Only the row scratch this run uses grows: decode never allocates the shared copy, and a
    // prompt never the per-thread ones.
    if (split_rows) {
        shared_rows_.reserve(c, n);
    } else {
        if (per_thread_.size() < static_cast<size_t>(team)) per_thread_.resize(static_cast<size_t>(team));
        for (RowScratch& rows : per_thread_) rows.reserve(c, n);
    }
}

size_t InferenceSession::scratch_bytes() const {
    const auto row_bytes = [](const RowScratch& r) {
        return r.x.bytes() + r.normed.bytes() + r.h_sub.bytes() + r.rstd.bytes() + r.dim_input.values.bytes() +
               r.ffn_input.values.bytes();
    };
    size_t bytes = row_bytes(shared_rows_) + quantized_.values.bytes();
    for (const RowScratch& rows : per_thread_) bytes += row_bytes(rows);
    for (const Array<float>* a : {&q_, &k_, &v_, &att_, &proj_, &gate_, &up_, &h_, &normed_, &rstd_, &logits_})
        bytes += a->bytes();
    return bytes;
}

void InferenceSession::RowScratch::reserve(const ModelConfig& c, int n) {
    if (n > capacity) {
        const size_t N = static_cast<size_t>(n);
        x = Array<float>(MemCategory::scratch, N * c.dim);
        normed = Array<float>(MemCategory::scratch, N * c.dim);
        h_sub = c.subln ? Array<float>(MemCategory::scratch, N * c.ffn_dim) : Array<float>();
        rstd = Array<float>(MemCategory::scratch, N);
        capacity = n;
    }
    // Shaped here, outside the threads: the kernels read their row count, and the padding
    // stays zero while the threads fill the rows.
    dim_input.reshape(n, c.dim);
    ffn_input.reshape(n, c.ffn_dim);
}

void InferenceSession::plan_product_rows(std::span<const RowGroup> groups, bool kept_only,
                                         std::vector<ProductRows>& runs) {
    runs.clear();
    int first = 0;
    for (const RowGroup& group : groups) {
        const int count = kept_only ? group.kept_rows() : group.rows;
        if (count == 1 && !runs.empty() && !runs.back().whole) {
            ++runs.back().count;
        } else {
            runs.push_back({first, count, count > 1});
        }
        first += count;
    }
}

void InferenceSession::multiply(const InferenceLinear& w, const ProductInput& input, float* out,
                                std::span<const ProductRows> rows, int first_row, int last_row) const {
    if (first_row >= last_row) return;
    switch (w.format) {
        case LinearFormat::ternary:
            ternary_matmul_rows(w.ternary, *input.quantized, out, first_row, last_row, best_integer_isa());
            return;
        case LinearFormat::ternary_lookup:
            ternary_lookup_matmul_rows(w.lookup, *input.quantized, out, first_row, last_row);
            return;
        case LinearFormat::int8:
            int8_matmul_rows(w.int8, *input.quantized, out, first_row, last_row, best_integer_isa());
            return;
        case LinearFormat::dense:
            for (const ProductRows& run : rows) {
                multiply_dense(w, input.rows + static_cast<size_t>(run.first) * w.cols,
                               out + static_cast<size_t>(run.first) * w.rows, run.count, run.rows_per_product(),
                               first_row, last_row,
                               [&](int block, int) { return w.dense + static_cast<size_t>(block) * w.cols; });
            }
            return;
        case LinearFormat::half:
            for (const ProductRows& run : rows) {
                const float* x = input.rows + static_cast<size_t>(run.first) * w.cols;
                float* run_out = out + static_cast<size_t>(run.first) * w.rows;
                // Decodes: the weights straight from memory, widened in registers, each weight
                // row read once for all the rows, each row's sum in a lone decode's order.
                if (run.count == 1) {
                    half_gemv_rows(x, w.halves, w.cols, run_out, first_row, last_row);
                } else if (!run.whole) {
                    half_gemm_rows(x, run.count, w.halves, w.cols, run_out, w.rows, first_row, last_row);
                } else {
                    // A prompt's rows: each block widened into this thread's copy, which stays in
                    // its cache for the dense format's gemm (the fp32 weights' products).
                    thread_local Array<float> widened;
                    const size_t block_floats = static_cast<size_t>(kDenseBlockRows) * w.cols;
                    if (widened.size() < block_floats) widened = Array<float>(MemCategory::scratch, block_floats);
                    multiply_dense(w, x, run_out, run.count, run.count, first_row, last_row,
                                   [&](int block, int block_end) {
                                       widen_f16(w.halves + static_cast<size_t>(block) * w.cols, widened.data(),
                                                 static_cast<size_t>(block_end - block) * w.cols);
                                       return static_cast<const float*>(widened.data());
                                   });
                }
            }
            return;
    }
}

template <typename BlockWeights>
void InferenceSession::multiply_dense(const InferenceLinear& w, const float* input, float* out, int n,
                                      int rows_per_gemm, int first_row, int last_row,
                                      BlockWeights block_weights) const {
    // One gemm per whole block of kDenseBlockRows rows (counted from row 0), whatever share of
    // it this thread holds: oneDNN rounds a column differently with the call's shape (its AVX2
    // kernels do), so equal calls keep the logits independent of the thread count. A block the
    // share cuts is computed whole into scratch, and only the share's columns are kept. gemm
    // stays on this thread.
    const int step = rows_per_gemm;
    thread_local Array<float> cut_block;  // (step, kDenseBlockRows)
    const size_t cut_floats = static_cast<size_t>(step) * kDenseBlockRows;
    for (int block = first_row / kDenseBlockRows * kDenseBlockRows; block < last_row; block += kDenseBlockRows) {
        const int block_end = std::min(block + kDenseBlockRows, w.rows);
        const int keep_first = std::max(block, first_row), keep_last = std::min(block_end, last_row);
        const bool whole = keep_first == block && keep_last == block_end;
        if (!whole && cut_block.size() < cut_floats) cut_block = Array<float>(MemCategory::scratch, cut_floats);
        const float* weights = block_weights(block, block_end);
        for (int r = 0; r < n; r += step) {
            const float* x = input + static_cast<size_t>(r) * w.cols;
            float* row_out = out + static_cast<size_t>(r) * w.rows;
            if (whole) {
                gemm(false, true, step, block_end - block, w.cols, 1.0f, x, w.cols, weights, w.cols, 0.0f,
                     row_out + block, w.rows);
                continue;
            }
            gemm(false, true, step, block_end - block, w.cols, 1.0f, x, w.cols, weights, w.cols, 0.0f,
                 cut_block.data(), kDenseBlockRows);
            for (int i = 0; i < step; ++i)
                std::copy(cut_block.data() + static_cast<size_t>(i) * kDenseBlockRows + (keep_first - block),
                          cut_block.data() + static_cast<size_t>(i) * kDenseBlockRows + (keep_last - block),
                          row_out + static_cast<size_t>(i) * w.rows + keep_first);
        }
    }
}

void InferenceSession::multiply_share(std::initializer_list<LinearJob> jobs, const ProductInput& input,
                                      std::span<const ProductRows> rows, int thread, int threads) const {
    int total_rows = 0;
    for (const LinearJob& job : jobs) total_rows += job.weight->rows;
    multiply_jobs_rows(jobs, input, rows, share_begin(total_rows, threads, thread, kShareAlign),
                       share_begin(total_rows, threads, thread + 1, kShareAlign));
}

void InferenceSession::multiply_jobs_rows(std::initializer_list<LinearJob> jobs, const ProductInput& input,
                                          std::span<const ProductRows> rows, int begin, int end) const {
    int offset = 0;
    for (const LinearJob& job : jobs) {
        const int job_rows = job.weight->rows;
        multiply(*job.weight, input, job.out, rows, std::max(begin - offset, 0), std::min(end - offset, job_rows));
        offset += job_rows;
    }
}

void InferenceSession::multiply_dealt(std::initializer_list<LinearJob> jobs, const ProductInput& input,
                                      ThreadPart& part) {
    int total_rows = 0;
    for (const LinearJob& job : jobs) total_rows += job.weight->rows;
    int begin = 0, end = 0;
    while (row_dealer_.claim(part.dealt, total_rows, part.threads, kShareAlign, begin, end))
        multiply_jobs_rows(jobs, input, block_rows_, begin, end);
    part.dealt += total_rows;
}

float* InferenceSession::value_rows(BlockValue value, RowScratch& rows) {
    switch (value) {
        case BlockValue::att: return att_.data();
        case BlockValue::h: return h_.data();
        case BlockValue::ln1:
        case BlockValue::att_sub:
        case BlockValue::ln2: return rows.normed.data();
        case BlockValue::h_sub: return rows.h_sub.data();
        default: return rows.x.data();  // the stream (input, mid, output), updated in place
    }
}

InferenceSession::ProductInput InferenceSession::prepare_input(BlockValue value, const InferenceLinear& product,
                                                               const ThreadPart& part) {
    const float* rows = value_rows(value, *part.rows.scratch);
    Int8Rows* quantized = nullptr;
    if (product.quantized()) {
        const int cols = block_value_cols(value, model_.config);
        quantized = cols == model_.config.dim ? &part.rows.scratch->dim_input : &part.rows.scratch->ffn_input;
        for (int r = part.rows.first; r < part.rows.last; ++r)
            quantized->scales[static_cast<size_t>(r)] =
                quantize_row_int8(rows + static_cast<size_t>(r) * cols, cols, quantized->mutable_row(r),
                                  &quantized->sums[static_cast<size_t>(r)]);
    }
    if (part.rows.split) team_barrier_.arrive_and_wait();
    return {rows, quantized};
}

namespace {

// Whether each thread computes the q, k and v of its own kv heads and attends to them alone;
// otherwise the rows of those products and the attention's pairs are shared out apart.
bool kv_heads_split_evenly(const ModelConfig& c, int threads) { return c.n_kv_heads % threads == 0; }

// f(keys, values) of `layer` in `cache`, as the attention kernels take the cache's type:
// pointers to fp32 or fp16 entries, or Int8Codes.
template <typename F>
void with_cache_layer(KvCache& cache, size_t layer, F f) {
    switch (cache.type) {
        case KvCacheType::f32: f(cache.keys[layer].data(), cache.values[layer].data()); break;
        case KvCacheType::f16: f(cache.keys_f16[layer].data(), cache.values_f16[layer].data()); break;
        case KvCacheType::int8:
            f(Int8Codes{cache.keys_int8[layer].data(), cache.key_scales[layer].data()},
              Int8Codes{cache.values_int8[layer].data(), cache.value_scales[layer].data()});
            break;
    }
}

}  // namespace

void InferenceSession::attend(int layer, const ThreadPart& part, float* out) {
    const ModelConfig& c = model_.config;
    const bool own_heads = kv_heads_split_evenly(c, part.threads);
    const int C = c.dim, D = c.head_dim(), group = c.n_heads / c.n_kv_heads, H = c.n_kv_heads;
    const size_t l = static_cast<size_t>(layer), kv_dim = static_cast<size_t>(c.kv_dim());
    // Where the kv heads do not split evenly, the (group, kv head) pairs in group-major order are
    // cut into the threads' shares by their cost, a group's rows times the positions they attend
    // to: a pair goes to the thread whose share holds its middle. Every thread computes the same cut.
    const auto pair_cost = [](const RowGroup& g) { return static_cast<double>(g.rows) * (g.pos + g.rows); };
    double total_cost = 0;
    if (!own_heads)
        for (const RowGroup& g : groups_) total_cost += H * pair_cost(g);
    double cost_before = 0;  // of the pairs of earlier groups
    // Each group's rows are stored first, then each attends to the positions up to its own (a
    // chunk's rows sharing the cache's loads), reading its key and value back from the cache (an
    // fp16 one rounds them). Decode's chains are the training forward's, so a prompt from
    // position 0 gets its bits.
    for (size_t index = 0; index < groups_.size(); ++index) {
        const RowGroup& g = groups_[index];
        int kv_begin = part.kv_begin, kv_end = part.kv_end;
        if (!own_heads) {
            const double cost = pair_cost(g);
            const auto owner = [&](int h) {
                const int share = static_cast<int>((cost_before + (h + 0.5) * cost) * part.threads / total_cost);
                return std::min(share, part.threads - 1);
            };
            kv_begin = 0;
            while (kv_begin < H && owner(kv_begin) < part.thread) ++kv_begin;
            kv_end = kv_begin;
            while (kv_end < H && owner(kv_end) == part.thread) ++kv_end;
            cost_before += H * cost;
        }
        if (kv_begin >= kv_end) continue;
        const int head_begin = kv_begin * group, head_end = kv_end * group;
        const size_t first = static_cast<size_t>(g.first_row);
        float* q = q_.data() + first * C;
        rope_forward_heads(q, g.rows, C, head_begin, head_end, rope_, g.pos);
        rope_forward_heads(k_.data() + first * kv_dim, g.rows, kv_dim, kv_begin, kv_end, rope_, g.pos);
        float* group_out = out + first * C;
        with_cache_layer(*g.cache, l, [&](auto keys, auto values) {
            const KvCache& cache = *g.cache;
            store_keys_and_values(keys, cache.key_stride, values, cache.value_stride, k_.data() + first * kv_dim,
                                  v_.data() + first * kv_dim, g.pos, g.rows, c.n_kv_heads, D, kv_begin, kv_end);
            if (g.rows == 1) {
                attention_decode(group_out, q, keys, cache.key_stride, values, cache.value_stride, g.pos, c.n_heads,
                                 c.n_kv_heads, D, head_begin, head_end);
            } else {
                attention_decode_rows(group_out, q, C, keys, cache.key_stride, values, cache.value_stride, g.pos,
                                      g.rows, c.n_heads, c.n_kv_heads, D, head_begin, head_end);
            }
        });
    }
}

void InferenceSession::run_blocks(const int32_t* tokens, int n, bool split_rows, int thread, int threads) {
    const ModelConfig& c = model_.config;
    ThreadPart part;
    part.rows = split_rows ? RowShare{&shared_rows_, share_begin(n, threads, thread, 1),
                                      share_begin(n, threads, thread + 1, 1), true}
                           : RowShare{&per_thread_[static_cast<size_t>(thread)], 0, n, false};
    part.n = n;
    part.thread = thread;
    part.threads = threads;
    part.kv_begin = share_begin(c.n_kv_heads, threads, thread, 1);
    part.kv_end = share_begin(c.n_kv_heads, threads, thread + 1, 1);

    model_.embedding.lookup(tokens + part.rows.first, part.rows.count(),
                            part.rows.scratch->x.data() + static_cast<size_t>(part.rows.first) * c.dim);
    for (int l = 0; l < c.n_layers; ++l)
        for (const BlockStep& step : block_) run_step(step, l, part);
}

void InferenceSession::run_step(const BlockStep& step, int layer, ThreadPart& part) {
    const ModelConfig& c = model_.config;
    const InferenceLayer& w = model_.layers[static_cast<size_t>(layer)];
    const RowShare& share = part.rows;
    const int n = part.n;
    float* out = value_rows(step.out, *share.scratch);
    switch (step.op) {
        case BlockOp::rmsnorm: {
            const int cols = block_value_cols(step.in, c);
            const size_t offset = static_cast<size_t>(share.first) * cols;
            rmsnorm_forward_serial(out + offset, share.scratch->rstd.data() + share.first,
                                   value_rows(step.in, *share.scratch) + offset, layer_gain(w, step.weights[0]),
                                   share.count(), cols, c.norm_eps);
            return;
        }
        case BlockOp::attention: {
            const InferenceLinear &wq = layer_linear(w, step.weights[0]), &wk = layer_linear(w, step.weights[1]),
                                  &wv = layer_linear(w, step.weights[2]);
            const ProductInput input = prepare_input(step.in, wq, part);
            // With kv heads split evenly, a thread computes the q, k and v of its own heads and
            // attends without waiting; otherwise the rows are split evenly and the threads meet
            // before each attends to its share of the (group, kv head) pairs.
            if (kv_heads_split_evenly(c, part.threads)) {
                const int D = c.head_dim(), group = c.n_heads / c.n_kv_heads;
                multiply(wq, input, q_.data(), block_rows_, part.kv_begin * group * D, part.kv_end * group * D);
                multiply(wk, input, k_.data(), block_rows_, part.kv_begin * D, part.kv_end * D);
                multiply(wv, input, v_.data(), block_rows_, part.kv_begin * D, part.kv_end * D);
            } else {
                multiply_dealt({{&wq, q_.data()}, {&wk, k_.data()}, {&wv, v_.data()}}, input, part);
                team_barrier_.arrive_and_wait();
            }
            attend(layer, part, out);
            team_barrier_.arrive_and_wait();
            return;
        }
        case BlockOp::gated_linears: {
            // Each dealt range of columns of gate, up and out whole: the activation needs no meeting.
            const InferenceLinear &w_gate = layer_linear(w, step.weights[0]), &w_up = layer_linear(w, step.weights[1]);
            const ProductInput input = prepare_input(step.in, w_gate, part);
            int begin = 0, end = 0;
            while (row_dealer_.claim(part.dealt, c.ffn_dim, part.threads, kShareAlign, begin, end)) {
                multiply(w_gate, input, gate_.data(), block_rows_, begin, end);
                multiply(w_up, input, up_.data(), block_rows_, begin, end);
                for (int i = 0; i < n; ++i) {
                    const size_t row = static_cast<size_t>(i) * c.ffn_dim + begin;
                    gated_forward_serial(c.ffn_activation, out + row, gate_.data() + row, up_.data() + row,
                                         end - begin);
                }
            }
            part.dealt += c.ffn_dim;
            team_barrier_.arrive_and_wait();
            return;
        }
        case BlockOp::residual_linear: {
            // out and the residual are both the stream (value_rows): the product adds in place.
            const InferenceLinear& weight = layer_linear(w, step.weights[0]);
            multiply_dealt({{&weight, proj_.data()}}, prepare_input(step.in, weight, part), part);
            team_barrier_.arrive_and_wait();
            const size_t first = static_cast<size_t>(share.first) * c.dim;
            add_rows(out + first, proj_.data() + first, static_cast<size_t>(share.count()) * c.dim);
            return;
        }
    }
}

void InferenceSession::run_head(const float* x) {
    const ModelConfig& c = model_.config;
    const InferenceLinear& head = model_.head;
    const int n = static_cast<int>(head_sources_.size());
    if (head_sources_.back() - head_sources_.front() + 1 == n) {
        rmsnorm_forward(normed_.data(), rstd_.data(), x + static_cast<size_t>(head_sources_[0]) * c.dim,
                        model_.output_norm, n, c.dim, c.norm_eps);
    } else {
        for (int i = 0; i < n; ++i)
            rmsnorm_forward_serial(normed_.data() + static_cast<size_t>(i) * c.dim, rstd_.data() + i,
                                   x + static_cast<size_t>(head_sources_[static_cast<size_t>(i)]) * c.dim,
                                   model_.output_norm, 1, c.dim, c.norm_eps);
    }
    if (head.format == LinearFormat::dense) {
        // model_forward's call for a sequence's rows, the whole head on the library's threads.
        for (const ProductRows& run : head_rows_) {
            const int step = run.rows_per_product();
            for (int r = run.first; r < run.first + run.count; r += step) {
                linear_forward(logits_.data() + static_cast<size_t>(r) * head.rows,
                               normed_.data() + static_cast<size_t>(r) * head.cols, head.dense, step, head.cols,
                               head.rows);
            }
        }
        return;
    }
    if (head.quantized()) quantize_rows_int8(normed_.data(), n, head.cols, quantized_);
    const ProductInput input{normed_.data(), head.quantized() ? &quantized_ : nullptr};
#pragma omp parallel
    multiply_share({{&head, logits_.data()}}, input, head_rows_, omp_get_thread_num(), omp_get_num_threads());
}

namespace {

void check_tokens(const int32_t* tokens, int n, int vocab) {
    for (int i = 0; i < n; ++i)
        if (tokens[i] < 0 || tokens[i] >= vocab)
            throw Error("token id " + std::to_string(tokens[i]) + " is outside the vocabulary of " +
                        std::to_string(vocab));
}

}  // namespace

void InferenceSession::forward(const int32_t* tokens, int n) {
    // Only the rows whose logits are kept go through the final norm and the head.
    head_sources_.clear();
    for (const RowGroup& g : groups_) {
        const int end = g.first_row + g.rows;
        for (int r = end - g.kept_rows(); r < end; ++r) head_sources_.push_back(r);
    }
    plan_product_rows(groups_, false, block_rows_);
    plan_product_rows(groups_, true, head_rows_);
    // One team for all blocks: its threads meet at four barriers per block (docs/results.md),
    // team_barrier_'s rather than the runtime's, which cost several times more.
    const int team = std::max(1, omp_get_max_threads());
    const bool split_rows = n >= kSplitRowsPerThread * team;
    reserve(n, static_cast<int>(head_sources_.size()), team, split_rows);
#pragma omp parallel num_threads(team)
    {
#pragma omp single
        {
            team_barrier_.set_threads(omp_get_num_threads());  // the runtime may give fewer than asked
            row_dealer_.reset();
        }
        run_blocks(tokens, n, split_rows, omp_get_thread_num(), omp_get_num_threads());
    }
    run_head((split_rows ? shared_rows_ : per_thread_[0]).x.data());
}

const float* InferenceSession::run(const int32_t* tokens, int n, LogitRows rows) {
    if (n <= 0) throw Error("inference: no tokens to run");
    if (n > cache_.max_seq - cache_.length)
        throw Error(std::to_string(cache_.length + n) + " tokens do not fit the context of " +
                    std::to_string(cache_.max_seq));
    check_tokens(tokens, n, model_.config.vocab_size);
    groups_.assign(1, {&cache_, cache_.length, 0, n, rows});
    forward(tokens, n);
    cache_.length += n;
    return logits_.data();
}

const float* InferenceSession::run_batch(InferenceSession& workspace, std::span<const BatchPart> parts) {
    require(!parts.empty(), "inference: no sequences to run");
    const ModelConfig& c = workspace.model_.config;
    for (size_t i = 0; i < parts.size(); ++i) {
        const BatchPart& part = parts[i];
        const InferenceSession& s = *part.session;
        require(&s.model_ == &workspace.model_, "inference: a batch runs sessions of one model");
        require(part.count >= 1, "inference: a part of the batch has no tokens");
        require(part.count <= s.cache_.max_seq - s.cache_.length,
                "inference: a part of the batch does not fit its sequence's context");
        require(s.cache_.max_seq <= workspace.cache_.max_seq,
                "inference: a sequence of the batch is longer than the workspace's (whose RoPE table the batch uses)");
        for (size_t j = 0; j < i; ++j)
            require(parts[j].session != &s, "inference: a session appears twice in one batch");
        check_tokens(part.tokens, part.count, c.vocab_size);
    }
    workspace.groups_.clear();
    workspace.batch_tokens_.clear();
    for (const BatchPart& part : parts) {
        const int first = static_cast<int>(workspace.batch_tokens_.size());
        workspace.groups_.push_back(
            {&part.session->cache_, part.session->cache_.length, first, part.count, part.logits});
        workspace.batch_tokens_.insert(workspace.batch_tokens_.end(), part.tokens, part.tokens + part.count);
    }
    workspace.forward(workspace.batch_tokens_.data(), static_cast<int>(workspace.batch_tokens_.size()));
    for (const BatchPart& part : parts) part.session->cache_.length += part.count;
    return workspace.logits_.data();
}

}  // namespace dqt
