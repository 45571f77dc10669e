#include "cuda/attention_tc.h"

#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "cuda/block_reduce.cuh"
#include "cuda/cuda_check.h"
#include "cuda/device_memory.h"

namespace dqt::cuda {

namespace {

constexpr unsigned kThreads = 256;
// Scores (fp32) and probabilities (bf16) of one chunk of query rows, for every (batch, head).
constexpr size_t kChunkBudgetBytes = size_t{512} << 20;
constexpr int kChunkRowMultiple = 64;

__device__ uint16_t to_bf16(float x) { return __bfloat16_as_ushort(__float2bfloat16_rn(x)); }
__device__ float from_bf16(uint16_t bits) { return __bfloat162float(__ushort_as_bfloat16(bits)); }

// grid (blocks over T * D / 8, B * H): out (B, H, T, D) bf16 = in (B, T, in_heads, D), query
// head h reading head h / (H / in_heads) of in; a thread converts 8 consecutive elements of a row.
__global__ void pack_heads_kernel(uint16_t* out, const float* in, int seq, int heads, int in_heads, int head_dim) {
    const int per_row = head_dim / 8;
    const int e = blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= seq * per_row) return;
    const int bh = blockIdx.y, b = bh / heads, h = bh % heads, t = e / per_row, d = e % per_row * 8;
    const float* from = in + ((static_cast<size_t>(b) * seq + t) * in_heads + h / (heads / in_heads)) * head_dim + d;
    const float4 x = reinterpret_cast<const float4*>(from)[0], y = reinterpret_cast<const float4*>(from)[1];
    auto pair = [](float lo, float hi) { return uint32_t{to_bf16(lo)} | uint32_t{to_bf16(hi)} << 16; };
    const uint4 packed{pair(x.x, x.y), pair(x.z, x.w), pair(y.x, y.y), pair(y.z, y.w)};
    *reinterpret_cast<uint4*>(out + (static_cast<size_t>(bh) * seq + t) * head_dim + d) = packed;
}

// grid (blocks over T * D / 4, B * out_heads): out (B, T, out_heads, D) = (accumulate ? out : 0)
// + the sum over the H / out_heads query heads of each out head of in (B, H, T, D), in head
// order; a thread does 4 consecutive elements of a row.
__global__ void unpack_heads_kernel(float* out, const float* in, int seq, int heads, int out_heads, int head_dim,
                                    bool accumulate) {
    const int per_row = head_dim / 4;
    const int e = blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= seq * per_row) return;
    const int bg = blockIdx.y, b = bg / out_heads, g = bg % out_heads, t = e / per_row, d = e % per_row * 4;
    const int group = heads / out_heads;
    float4 sum{0.0f, 0.0f, 0.0f, 0.0f};
    for (int j = 0; j < group; ++j) {
        const size_t h = static_cast<size_t>(g) * group + j;
        const float4 x = *reinterpret_cast<const float4*>(in + ((b * static_cast<size_t>(heads) + h) * seq + t) * head_dim + d);
        sum.x += x.x;
        sum.y += x.y;
        sum.z += x.z;
        sum.w += x.w;
    }
    float4* to = reinterpret_cast<float4*>(out + ((static_cast<size_t>(b) * seq + t) * out_heads + g) * head_dim + d);
    if (accumulate) {
        const float4 was = *to;
        sum = float4{was.x + sum.x, was.y + sum.y, was.z + sum.z, was.w + sum.w};
    }
    *to = sum;
}

// A block per row of a chunk: s and p (B * H, rows, ld), row i of matrix bh (blockIdx.x = bh *
// rows + i) is query t = first_row + i, which sees keys j <= t of the chunk's `keys`.
// p = bf16(exp(scale * s - lse)), zero past t. kFindLse: lse (B, H, T) computed into lse_out
// (forward), else read from lse_in (the backward's recomputation).
template <bool kFindLse>
__global__ void probabilities_kernel(uint16_t* p, float* lse_out, const float* lse_in, const float* s, int rows,
                                     int keys, int ld, int first_row, int seq, float scale) {
    __shared__ float shared[32];
    const int bh = blockIdx.x / rows, t = first_row + blockIdx.x % rows;
    const size_t base = static_cast<size_t>(blockIdx.x) * ld;
    const size_t row = static_cast<size_t>(bh) * seq + t;
    float lse_t;
    if constexpr (kFindLse) {
        float best = -INFINITY;
        for (int j = threadIdx.x; j <= t; j += blockDim.x) best = fmaxf(best, scale * s[base + j]);
        best = block_max(best, shared);
        float sum = 0.0f;
        for (int j = threadIdx.x; j <= t; j += blockDim.x) sum += expf(scale * s[base + j] - best);
        lse_t = best + logf(block_sum(sum, shared));
        if (threadIdx.x == 0) lse_out[row] = lse_t;
    } else {
        lse_t = lse_in[row];
    }
    for (int j = threadIdx.x; j < keys; j += blockDim.x) p[base + j] = j <= t ? to_bf16(expf(scale * s[base + j] - lse_t)) : 0;
}

// In place of p: dS = bf16(scale * P (dP - delta)), delta = sum_j P_j dP_j over the row (the
// scores' scale folded in, so that dQ = dS K and dK = dS^T Q).
__global__ void probabilities_backward_kernel(uint16_t* p_then_ds, const float* dp, int keys, int ld, float scale) {
    __shared__ float shared[32];
    const size_t base = static_cast<size_t>(blockIdx.x) * ld;
    float dot = 0.0f;
    for (int j = threadIdx.x; j < keys; j += blockDim.x) dot += from_bf16(p_then_ds[base + j]) * dp[base + j];
    const float delta = block_sum(dot, shared);
    for (int j = threadIdx.x; j < keys; j += blockDim.x) {
        p_then_ds[base + j] = to_bf16(scale * from_bf16(p_then_ds[base + j]) * (dp[base + j] - delta));
    }
}

struct Shape {
    int batch, seq, heads, kv_heads, head_dim;
    int matrices() const { return batch * heads; }                // one per (batch, query head)
    int64_t head_stride() const { return int64_t{seq} * head_dim; }  // between them, head-major
    size_t head_major_count() const { return static_cast<size_t>(matrices()) * head_stride(); }
};

// Rows of a score matrix padded to 8 elements: 16-byte aligned bf16 rows for cuBLASLt.
int padded(int keys) { return (keys + 7) / 8 * 8; }

int chunk_rows(const Shape& shape, int max_chunk_rows) {
    if (max_chunk_rows > 0) return std::min(max_chunk_rows, shape.seq);
    const size_t row_bytes =
        static_cast<size_t>(shape.matrices()) * padded(shape.seq) * (sizeof(float) + sizeof(uint16_t));
    const int budget_rows = static_cast<int>(std::min<size_t>(kChunkBudgetBytes / row_bytes, shape.seq));
    const int rows = std::max(kChunkRowMultiple, budget_rows / kChunkRowMultiple * kChunkRowMultiple);
    // At least four chunks where the sequence allows: the last chunk multiplies all keys, the
    // first a quarter of them, so causal attention does about 5/8 of the full products.
    const int quarter = ((shape.seq + 3) / 4 + kChunkRowMultiple - 1) / kChunkRowMultiple * kChunkRowMultiple;
    return std::min({rows, quarter, shape.seq});
}

void check_shape(const Shape& shape) {
    if (shape.kv_heads <= 0 || shape.heads % shape.kv_heads != 0) {
        throw Error("attention: heads (" + std::to_string(shape.heads) + ") must be a multiple of kv_heads (" +
                    std::to_string(shape.kv_heads) + ")");
    }
    if (shape.head_dim % 8 != 0) {
        throw Error("the tensor-core attention needs head_dim a multiple of 8, not " + std::to_string(shape.head_dim));
    }
}

// The (B * H or B * out_heads) matrices of pack and unpack go in the grid's y (at most 65,535).
void check_grid_rows(int rows) {
    if (rows > 65535) {
        throw Error("the tensor-core attention takes batch x heads up to 65,535, not " + std::to_string(rows) +
                    ": use a smaller --batch");
    }
}

// x (B, T, in_heads, D) fp32 -> (B, H, T, D) bf16, each query head's own copy of its kv head.
DeviceArray<uint16_t> pack_heads(const float* x, const Shape& shape, int in_heads) {
    check_grid_rows(shape.matrices());
    DeviceArray<uint16_t> packed(MemCategory::scratch, shape.head_major_count());
    const dim3 grid(blocks_for(static_cast<size_t>(shape.seq) * shape.head_dim / 8, kThreads), shape.matrices());
    pack_heads_kernel<<<grid, kThreads>>>(packed.data(), x, shape.seq, shape.heads, in_heads, shape.head_dim);
    check_launch("pack_heads_kernel");
    return packed;
}

void unpack_heads(float* out, const float* head_major, const Shape& shape, int out_heads, bool accumulate) {
    const dim3 grid(blocks_for(static_cast<size_t>(shape.seq) * shape.head_dim / 4, kThreads), shape.batch * out_heads);
    unpack_heads_kernel<<<grid, kThreads>>>(out, head_major, shape.seq, shape.heads, out_heads, shape.head_dim,
                                            accumulate);
    check_launch("unpack_heads_kernel");
}

// One chunk of query rows [first, first + rows), which sees keys [0, first + rows).
struct Chunk {
    int first, rows, keys, ld;
    int64_t stride() const { return int64_t{rows} * ld; }
};

// The operands every chunk reads, and the chunk's scores and probabilities.
struct Workspace {
    Shape shape;
    int chunk;
    DeviceArray<uint16_t> q, k, v;   // (B, H, T, D) bf16
    DeviceArray<float> scores;       // (B * H, chunk, padded(T)), also the backward's dP
    DeviceArray<uint16_t> probs;     // the same shape, bf16, also the backward's dS

    Workspace(const Shape& s, const float* q_in, const float* k_in, const float* v_in, int max_chunk_rows)
        : shape(s),
          chunk(chunk_rows(s, max_chunk_rows)),
          q(pack_heads(q_in, s, s.heads)),
          k(pack_heads(k_in, s, s.kv_heads)),
          v(pack_heads(v_in, s, s.kv_heads)),
          scores(MemCategory::scratch, static_cast<size_t>(s.matrices()) * chunk * padded(s.seq)),
          probs(MemCategory::scratch, scores.size()) {}

    Chunk chunk_at(int first) const {
        const int rows = std::min(chunk, shape.seq - first);
        return {first, rows, first + rows, padded(first + rows)};
    }
    // A head-major (B, H, T, D) tensor from row `first` on.
    StridedMatrices rows_of(const uint16_t* x, int first) const {
        return {{x + static_cast<size_t>(first) * shape.head_dim, true}, shape.head_dim, shape.head_stride()};
    }
    StridedMatrices chunk_matrices(const uint16_t* x, const Chunk& c) const { return {{x, true}, c.ld, c.stride()}; }

    // scores = Q_chunk K^T (unscaled), then probabilities with lse found (kFindLse) or given.
    template <bool kFindLse>
    void probabilities(const Gemm& gemm, const Chunk& c, float* lse_out, const float* lse_in) {
        const Shape& s = shape;
        gemm.multiply_batched(rows_of(q.data(), c.first), false, rows_of(k.data(), 0), true, scores.data(), c.ld,
                              c.stride(), c.rows, c.keys, s.head_dim, s.matrices(), 0.0f);
        probabilities_kernel<kFindLse><<<s.matrices() * c.rows, kThreads>>>(
            probs.data(), lse_out, lse_in, scores.data(), c.rows, c.keys, c.ld, c.first, s.seq, 1.0f / std::sqrt(float(s.head_dim)));
        check_launch("probabilities_kernel");
    }
};

}  // namespace

void attention_tc_forward(const Gemm& gemm, float* out, float* lse, const float* q, const float* k, const float* v,
                          int batch, int seq, int heads, int kv_heads, int head_dim, int max_chunk_rows) {
    const Shape s{batch, seq, heads, kv_heads, head_dim};
    check_shape(s);
    Workspace w(s, q, k, v, max_chunk_rows);
    DeviceArray<float> out_head_major(MemCategory::scratch, s.head_major_count());
    for (int first = 0; first < seq; first += w.chunk) {
        const Chunk c = w.chunk_at(first);
        w.probabilities<true>(gemm, c, lse, nullptr);
        // out rows of the chunk = P V
        gemm.multiply_batched(w.chunk_matrices(w.probs.data(), c), false, w.rows_of(w.v.data(), 0), false,
                              out_head_major.data() + static_cast<size_t>(first) * head_dim, head_dim, s.head_stride(),
                              c.rows, head_dim, c.keys, s.matrices(), 0.0f);
    }
    unpack_heads(out, out_head_major.data(), s, heads, false);
}

void attention_tc_backward(const Gemm& gemm, float* dq, float* dk, float* dv, const float* dout, const float* lse,
                           const float* q, const float* k, const float* v, int batch, int seq, int heads, int kv_heads,
                           int head_dim, int max_chunk_rows) {
    const Shape s{batch, seq, heads, kv_heads, head_dim};
    check_shape(s);
    Workspace w(s, q, k, v, max_chunk_rows);
    const DeviceArray<uint16_t> d_out = pack_heads(dout, s, heads);
    // Head-major fp32 gradients; dk and dv per query head, summed over each kv head's group at the end.
    DeviceArray<float> d_q(MemCategory::scratch, s.head_major_count()), d_k(MemCategory::scratch, s.head_major_count()),
        d_v(MemCategory::scratch, s.head_major_count());
    d_k.zero();  // every chunk adds into the rows of its keys
    d_v.zero();
    for (int first = 0; first < seq; first += w.chunk) {
        const Chunk c = w.chunk_at(first);
        w.probabilities<false>(gemm, c, nullptr, lse);
        const StridedMatrices d_out_rows = w.rows_of(d_out.data(), first);
        // dV[keys] += P^T dO_chunk
        gemm.multiply_batched(w.chunk_matrices(w.probs.data(), c), true, d_out_rows, false, d_v.data(), head_dim,
                              s.head_stride(), c.keys, head_dim, c.rows, s.matrices(), 1.0f);
        // dP = dO_chunk V^T, into the scores' memory; then dS in place of P
        gemm.multiply_batched(d_out_rows, false, w.rows_of(w.v.data(), 0), true, w.scores.data(), c.ld, c.stride(),
                              c.rows, c.keys, head_dim, s.matrices(), 0.0f);
        probabilities_backward_kernel<<<s.matrices() * c.rows, kThreads>>>(w.probs.data(), w.scores.data(), c.keys, c.ld,
                                                                           1.0f / std::sqrt(float(head_dim)));
        check_launch("probabilities_backward_kernel");
        // dQ_chunk = dS K; dK[keys] += dS^T Q_chunk
        gemm.multiply_batched(w.chunk_matrices(w.probs.data(), c), false, w.rows_of(w.k.data(), 0), false,
                              d_q.data() + static_cast<size_t>(first) * head_dim, head_dim, s.head_stride(), c.rows,
                              head_dim, c.keys, s.matrices(), 0.0f);
        gemm.multiply_batched(w.chunk_matrices(w.probs.data(), c), true, w.rows_of(w.q.data(), first), false, d_k.data(),
                              head_dim, s.head_stride(), c.keys, head_dim, c.rows, s.matrices(), 1.0f);
    }
    unpack_heads(dq, d_q.data(), s, heads, true);
    unpack_heads(dk, d_k.data(), s, kv_heads, true);
    unpack_heads(dv, d_v.data(), s, kv_heads, true);
}

}  // namespace dqt::cuda
