#include "cuda/kernels.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include "cuda/block_reduce.cuh"
#include "cuda/cuda_check.h"
#include "cuda/device_memory.h"

namespace dqt::cuda {

namespace {

constexpr unsigned kThreads = 256;

// ---- RMSNorm: a block per row ----------------------------------------------------------------

__global__ void rmsnorm_forward_kernel(float* y, float* rstd, const float* x, const float* gain, int cols, float eps) {
    __shared__ float shared[32];
    const size_t base = static_cast<size_t>(blockIdx.x) * cols;
    float squares = 0.0f;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) squares += x[base + c] * x[base + c];
    const float s = rsqrtf(block_sum(squares, shared) / cols + eps);
    for (int c = threadIdx.x; c < cols; c += blockDim.x) y[base + c] = x[base + c] * s * gain[c];
    if (threadIdx.x == 0) rstd[blockIdx.x] = s;
}

__global__ void rmsnorm_backward_input_kernel(float* dx, const float* dy, const float* x, const float* gain,
                                              const float* rstd, int cols) {
    __shared__ float shared[32];
    const size_t base = static_cast<size_t>(blockIdx.x) * cols;
    float dot = 0.0f;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) dot += dy[base + c] * gain[c] * x[base + c];
    dot = block_sum(dot, shared);
    const float s = rstd[blockIdx.x];
    const float coef = s * s * s * dot / cols;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) dx[base + c] += s * gain[c] * dy[base + c] - coef * x[base + c];
}

constexpr int kGainChunks = 64;  // row chunks whose partial gain gradients are summed after

// partial (kGainChunks, cols): chunk blockIdx.y's sum over its rows of dy * x * rstd.
__global__ void rmsnorm_gain_partial_kernel(float* partial, const float* dy, const float* x, const float* rstd,
                                            int rows, int cols) {
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= cols) return;
    const int per_chunk = (rows + kGainChunks - 1) / kGainChunks;
    const int r0 = blockIdx.y * per_chunk, r1 = min(rows, r0 + per_chunk);
    float sum = 0.0f;
    for (int r = r0; r < r1; ++r) sum += dy[static_cast<size_t>(r) * cols + c] * x[static_cast<size_t>(r) * cols + c] * rstd[r];
    partial[static_cast<size_t>(blockIdx.y) * cols + c] = sum;
}

__global__ void rmsnorm_gain_sum_kernel(float* dgain, const float* partial, int cols) {
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= cols) return;
    float sum = 0.0f;
    for (int k = 0; k < kGainChunks; ++k) sum += partial[static_cast<size_t>(k) * cols + c];
    dgain[c] += sum;
}

// ---- RoPE, SwiGLU, embedding: element-wise -------------------------------------------------

__global__ void rope_kernel(float* x, size_t pairs, int seq, int heads, int half, const float* cos, const float* sin,
                            float direction) {
    const size_t p = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
    if (p >= pairs) return;
    const int i = static_cast<int>(p % half);
    const int t = static_cast<int>((p / half / heads) % seq);
    const float c = cos[static_cast<size_t>(t) * half + i], s = direction * sin[static_cast<size_t>(t) * half + i];
    const float x0 = x[2 * p], x1 = x[2 * p + 1];
    x[2 * p] = x0 * c - x1 * s;
    x[2 * p + 1] = x0 * s + x1 * c;
}

constexpr unsigned kSquareBlocks = 1024;  // partial sums, added on the host in block order

__global__ void sum_of_squares_kernel(double* partial, const float* x, size_t count) {
    __shared__ double shared[kThreads];
    double sum = 0.0;
    for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < count;
         i += static_cast<size_t>(gridDim.x) * blockDim.x) {
        sum += static_cast<double>(x[i]) * x[i];
    }
    shared[threadIdx.x] = sum;
    __syncthreads();
    for (unsigned half = blockDim.x / 2; half > 0; half /= 2) {
        if (threadIdx.x < half) shared[threadIdx.x] += shared[threadIdx.x + half];
        __syncthreads();
    }
    if (threadIdx.x == 0) partial[blockIdx.x] = shared[0];
}

__global__ void scale_in_place_kernel(float* x, float factor, size_t count) {
    const size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
    if (i < count) x[i] *= factor;
}

__global__ void add_in_place_kernel(float* out, const float* in, size_t count) {
    const size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
    if (i < count) out[i] += in[i];
}

__device__ float sigmoid(float g) { return 1.0f / (1.0f + expf(-g)); }

__global__ void swiglu_forward_kernel(float* h, const float* gate, const float* up, size_t count) {
    const size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
    if (i < count) h[i] = gate[i] * sigmoid(gate[i]) * up[i];
}

__global__ void swiglu_backward_kernel(float* dgate, float* dup, const float* dh, const float* gate, const float* up,
                                       size_t count) {
    const size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
    if (i >= count) return;
    const float g = gate[i], sig = sigmoid(g);
    dgate[i] += dh[i] * up[i] * sig * (1.0f + g * (1.0f - sig));
    dup[i] += dh[i] * g * sig;
}

__global__ void embedding_forward_kernel(float* out, const int32_t* tokens, const float* table, int count, int dim) {
    const size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
    if (i >= static_cast<size_t>(count) * dim) return;
    out[i] = table[static_cast<size_t>(tokens[i / dim]) * dim + i % dim];
}

// A block row per distinct token, a thread per column: the token's rows summed in position order.
__global__ void embedding_backward_kernel(float* dtable, const float* dout, DeviceTokenGroups groups, int dim) {
    const int column = blockIdx.y * blockDim.x + threadIdx.x;
    if (column >= dim) return;
    const int group = blockIdx.x;
    float* row = dtable + static_cast<size_t>(groups.tokens[group]) * dim + column;
    float sum = *row;
    for (int p = groups.starts[group]; p < groups.starts[group + 1]; ++p)
        sum += dout[static_cast<size_t>(groups.positions[p]) * dim + column];
    *row = sum;
}

// ---- Cross-entropy: a block per row ----------------------------------------------------------

__global__ void cross_entropy_kernel(float* dlogits, const float* logits, const int32_t* targets, int vocab,
                                     float grad_scale, float* row_loss) {
    __shared__ float shared[32];
    const size_t base = static_cast<size_t>(blockIdx.x) * vocab;
    const int target = targets[blockIdx.x];
    const float z_target = logits[base + target];  // read before dlogits (maybe the same memory) is written
    float best = -INFINITY;
    for (int c = threadIdx.x; c < vocab; c += blockDim.x) best = fmaxf(best, logits[base + c]);
    const float max_z = block_max(best, shared);
    float sum = 0.0f;
    for (int c = threadIdx.x; c < vocab; c += blockDim.x) sum += expf(logits[base + c] - max_z);
    sum = block_sum(sum, shared);
    if (threadIdx.x == 0) row_loss[blockIdx.x] = logf(sum) + max_z - z_target;
    if (!dlogits) return;
    const float factor = grad_scale / sum;
    for (int c = threadIdx.x; c < vocab; c += blockDim.x) {
        const float e = expf(logits[base + c] - max_z) * factor;
        dlogits[base + c] = c == target ? e - grad_scale : e;
    }
}

// ---- Attention ---------------------------------------------------------------------------------
// A thread per query row (forward, dq) or key row (dk, dv), 64 rows a block; the other side
// streams through shared memory in tiles of kTile rows. A thread's own rows sit in shared
// memory too (padded: kOwnPad).

constexpr int kRows = 64;  // rows a block owns
constexpr int kTile = 32;  // rows of the other side per tile

// A thread's own rows are padded to D + kOwnPad floats: rows stay 16-byte aligned for float4
// reads, and the 4-float shift from row to row spreads a quarter-warp's 16-byte accesses over
// all 32 banks. Tile rows are read by every thread at once (a broadcast), as float4 too: one
// shared-memory load feeds four multiply-adds.
constexpr int kOwnPad = 4;

template <int D>
__device__ float dot_own(const float* own_row, const float* tile_row) {
    const float4* a = reinterpret_cast<const float4*>(own_row);
    const float4* b = reinterpret_cast<const float4*>(tile_row);
    float sum = 0.0f;
#pragma unroll
    for (int d = 0; d < D / 4; ++d) {
        const float4 x = a[d], y = b[d];
        sum += x.x * y.x;
        sum += x.y * y.y;
        sum += x.z * y.z;
        sum += x.w * y.w;
    }
    return sum;
}

// acc[d] += p * tile_row[d].
template <int D>
__device__ void add_scaled_row(float* acc, float p, const float* tile_row) {
    const float4* row = reinterpret_cast<const float4*>(tile_row);
#pragma unroll
    for (int d = 0; d < D / 4; ++d) {
        const float4 y = row[d];
        acc[4 * d] += p * y.x;
        acc[4 * d + 1] += p * y.y;
        acc[4 * d + 2] += p * y.z;
        acc[4 * d + 3] += p * y.w;
    }
}

// Copies rows [first, first + kTile) of one head (row stride `stride` floats) into tile (kTile, D);
// rows past seq become zeros.
template <int D>
__device__ void load_tile(float* tile, const float* base, size_t stride, int first, int seq) {
    for (int e = threadIdx.x; e < kTile * D; e += blockDim.x) {
        const int r = e / D, d = e % D;
        tile[e] = first + r < seq ? base[static_cast<size_t>(first + r) * stride + d] : 0.0f;
    }
}

template <int D>
__device__ void load_own(float* own, const float* base, size_t stride, int first, int seq) {
    for (int e = threadIdx.x; e < kRows * D; e += blockDim.x) {
        const int r = e / D, d = e % D;
        own[r * (D + kOwnPad) + d] = first + r < seq ? base[static_cast<size_t>(first + r) * stride + d] : 0.0f;
    }
}

// grid (query tiles of kRows, B * H). Shared: own q (kRows, D + kOwnPad), k and v tiles (kTile, D).
template <int D>
__global__ void __launch_bounds__(kRows) attention_forward_kernel(float* out, float* lse, const float* q, const float* k,
                                                                  const float* v, int seq, int heads, int kv_heads,
                                                                  float scale) {
    extern __shared__ float shared[];
    float* own_q = shared;
    float* k_tile = own_q + kRows * (D + kOwnPad);
    float* v_tile = k_tile + kTile * D;
    const int b = blockIdx.y / heads, h = blockIdx.y % heads, kvh = h / (heads / kv_heads);
    const int first = blockIdx.x * kRows, t = first + threadIdx.x;
    const size_t q_stride = static_cast<size_t>(heads) * D, kv_stride = static_cast<size_t>(kv_heads) * D;
    const float* q_head = q + static_cast<size_t>(b) * seq * q_stride + static_cast<size_t>(h) * D;
    const float* k_head = k + static_cast<size_t>(b) * seq * kv_stride + static_cast<size_t>(kvh) * D;
    const float* v_head = v + static_cast<size_t>(b) * seq * kv_stride + static_cast<size_t>(kvh) * D;
    load_own<D>(own_q, q_head, q_stride, first, seq);
    float acc[D];
#pragma unroll
    for (int d = 0; d < D; ++d) acc[d] = 0.0f;
    float running_max = -INFINITY, running_sum = 0.0f;
    const float* my_q = own_q + threadIdx.x * (D + kOwnPad);
    const int last_key = min(seq - 1, first + kRows - 1);
    for (int tile_first = 0; tile_first <= last_key; tile_first += kTile) {
        __syncthreads();
        load_tile<D>(k_tile, k_head, kv_stride, tile_first, seq);
        load_tile<D>(v_tile, v_head, kv_stride, tile_first, seq);
        __syncthreads();
        float s[kTile];
        float tile_max = -INFINITY;
#pragma unroll
        for (int j = 0; j < kTile; ++j) {
            s[j] = tile_first + j <= t ? dot_own<D>(my_q, k_tile + j * D) * scale : -INFINITY;
            tile_max = fmaxf(tile_max, s[j]);
        }
        if (tile_max == -INFINITY) continue;  // every key of the tile is in this row's future
        const float new_max = fmaxf(running_max, tile_max);
        const float correction = expf(running_max - new_max);
        running_sum *= correction;
#pragma unroll
        for (int d = 0; d < D; ++d) acc[d] *= correction;
#pragma unroll
        for (int j = 0; j < kTile; ++j) {
            const float p = expf(s[j] - new_max);  // 0 for masked keys
            running_sum += p;
            add_scaled_row<D>(acc, p, v_tile + j * D);
        }
        running_max = new_max;
    }
    if (t >= seq) return;
    float* out_row = out + (static_cast<size_t>(b) * seq + t) * q_stride + static_cast<size_t>(h) * D;
    const float inv = 1.0f / running_sum;
#pragma unroll
    for (int d = 0; d < D; ++d) out_row[d] = acc[d] * inv;
    lse[(static_cast<size_t>(b) * heads + h) * seq + t] = running_max + logf(running_sum);
}

// delta (B, H, T) = rowsum(dout * out).
__global__ void attention_delta_kernel(float* delta, const float* dout, const float* out, int seq, int heads,
                                       int head_dim, size_t rows) {
    const size_t row = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;  // (b, t, h)
    if (row >= rows) return;
    float sum = 0.0f;
    for (int d = 0; d < head_dim; ++d) sum += dout[row * head_dim + d] * out[row * head_dim + d];
    const int h = static_cast<int>(row % heads), t = static_cast<int>((row / heads) % seq);
    const size_t b = row / heads / seq;
    delta[(b * heads + h) * seq + t] = sum;
}

// dq: grid (query tiles, B * H). Shared: own q and dout (kRows, D + kOwnPad), k and v tiles (kTile, D).
template <int D>
__global__ void __launch_bounds__(kRows) attention_dq_kernel(float* dq, const float* dout, const float* lse,
                                                             const float* delta, const float* q, const float* k,
                                                             const float* v, int seq, int heads, int kv_heads,
                                                             float scale) {
    extern __shared__ float shared[];
    float* own_q = shared;
    float* own_dout = own_q + kRows * (D + kOwnPad);
    float* k_tile = own_dout + kRows * (D + kOwnPad);
    float* v_tile = k_tile + kTile * D;
    const int b = blockIdx.y / heads, h = blockIdx.y % heads, kvh = h / (heads / kv_heads);
    const int first = blockIdx.x * kRows, t = first + threadIdx.x;
    const size_t q_stride = static_cast<size_t>(heads) * D, kv_stride = static_cast<size_t>(kv_heads) * D;
    const size_t q_offset = static_cast<size_t>(b) * seq * q_stride + static_cast<size_t>(h) * D;
    const size_t kv_offset = static_cast<size_t>(b) * seq * kv_stride + static_cast<size_t>(kvh) * D;
    load_own<D>(own_q, q + q_offset, q_stride, first, seq);
    load_own<D>(own_dout, dout + q_offset, q_stride, first, seq);
    const size_t stat = (static_cast<size_t>(b) * heads + h) * seq + t;
    const float my_lse = t < seq ? lse[stat] : 0.0f, my_delta = t < seq ? delta[stat] : 0.0f;
    const float* my_q = own_q + threadIdx.x * (D + kOwnPad);
    const float* my_dout = own_dout + threadIdx.x * (D + kOwnPad);
    float acc[D];
#pragma unroll
    for (int d = 0; d < D; ++d) acc[d] = 0.0f;
    const int last_key = min(seq - 1, first + kRows - 1);
    for (int tile_first = 0; tile_first <= last_key; tile_first += kTile) {
        __syncthreads();
        load_tile<D>(k_tile, k + kv_offset, kv_stride, tile_first, seq);
        load_tile<D>(v_tile, v + kv_offset, kv_stride, tile_first, seq);
        __syncthreads();
        for (int j = 0; j < kTile && tile_first + j <= t; ++j) {
            const float p = expf(dot_own<D>(my_q, k_tile + j * D) * scale - my_lse);
            const float ds = p * (dot_own<D>(my_dout, v_tile + j * D) - my_delta);
            add_scaled_row<D>(acc, ds, k_tile + j * D);
        }
    }
    if (t >= seq) return;
    float* dq_row = dq + q_offset + static_cast<size_t>(t) * q_stride;
#pragma unroll
    for (int d = 0; d < D; ++d) dq_row[d] += acc[d] * scale;
}

// dk, dv: grid (key tiles, B * Hkv); each key row sums over the group's query heads. Shared:
// own k and v (kRows, D + kOwnPad), q and dout tiles (kTile, D), lse and delta of the tile (kTile).
template <int D>
__global__ void __launch_bounds__(kRows) attention_dkv_kernel(float* dk, float* dv, const float* dout,
                                                              const float* lse, const float* delta, const float* q,
                                                              const float* k, const float* v, int seq, int heads,
                                                              int kv_heads, float scale) {
    extern __shared__ float shared[];
    float* own_k = shared;
    float* own_v = own_k + kRows * (D + kOwnPad);
    float* q_tile = own_v + kRows * (D + kOwnPad);
    float* dout_tile = q_tile + kTile * D;
    float* lse_tile = dout_tile + kTile * D;
    float* delta_tile = lse_tile + kTile;
    const int b = blockIdx.y / kv_heads, kvh = blockIdx.y % kv_heads, group = heads / kv_heads;
    const int first = blockIdx.x * kRows, j = first + threadIdx.x;
    const size_t q_stride = static_cast<size_t>(heads) * D, kv_stride = static_cast<size_t>(kv_heads) * D;
    const size_t kv_offset = static_cast<size_t>(b) * seq * kv_stride + static_cast<size_t>(kvh) * D;
    load_own<D>(own_k, k + kv_offset, kv_stride, first, seq);
    load_own<D>(own_v, v + kv_offset, kv_stride, first, seq);
    const float* my_k = own_k + threadIdx.x * (D + kOwnPad);
    const float* my_v = own_v + threadIdx.x * (D + kOwnPad);
    float dk_acc[D], dv_acc[D];
#pragma unroll
    for (int d = 0; d < D; ++d) dk_acc[d] = dv_acc[d] = 0.0f;
    for (int g = 0; g < group; ++g) {
        const int h = kvh * group + g;
        const size_t q_offset = static_cast<size_t>(b) * seq * q_stride + static_cast<size_t>(h) * D;
        const size_t stat_offset = (static_cast<size_t>(b) * heads + h) * seq;
        for (int tile_first = first / kTile * kTile; tile_first < seq; tile_first += kTile) {
            __syncthreads();
            load_tile<D>(q_tile, q + q_offset, q_stride, tile_first, seq);
            load_tile<D>(dout_tile, dout + q_offset, q_stride, tile_first, seq);
            for (int r = threadIdx.x; r < kTile; r += blockDim.x) {
                const bool inside = tile_first + r < seq;
                lse_tile[r] = inside ? lse[stat_offset + tile_first + r] : 0.0f;
                delta_tile[r] = inside ? delta[stat_offset + tile_first + r] : 0.0f;
            }
            __syncthreads();
            if (j >= seq) continue;
            for (int i = 0; i < kTile; ++i) {
                const int t = tile_first + i;
                if (t < j || t >= seq) continue;  // causal: query t sees keys up to t
                const float p = expf(dot_own<D>(my_k, q_tile + i * D) * scale - lse_tile[i]);
                const float ds = p * (dot_own<D>(my_v, dout_tile + i * D) - delta_tile[i]);
                add_scaled_row<D>(dv_acc, p, dout_tile + i * D);
                add_scaled_row<D>(dk_acc, ds, q_tile + i * D);
            }
        }
    }
    if (j >= seq) return;
    float* dk_row = dk + kv_offset + static_cast<size_t>(j) * kv_stride;
    float* dv_row = dv + kv_offset + static_cast<size_t>(j) * kv_stride;
#pragma unroll
    for (int d = 0; d < D; ++d) {
        dk_row[d] += dk_acc[d] * scale;
        dv_row[d] += dv_acc[d];
    }
}

// Launches kernel<D> with `shared_bytes` of dynamic shared memory (raising the limit past 48 KB).
template <typename Kernel, typename... Args>
void launch_with_shared(Kernel kernel, dim3 grid, unsigned threads, size_t shared_bytes, const char* name,
                        Args... args) {
    cuda_check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(shared_bytes)),
               name);
    kernel<<<grid, threads, shared_bytes>>>(args...);
    check_launch(name);
}

void check_attention_shape(int heads, int kv_heads, int head_dim) {
    if (kv_heads <= 0 || heads % kv_heads != 0) {
        throw Error("attention: heads (" + std::to_string(heads) + ") must be a multiple of kv_heads (" +
                    std::to_string(kv_heads) + ")");
    }
    if (head_dim != 32 && head_dim != 64 && head_dim != 128) {
        throw Error("the CUDA attention supports head_dim 32, 64 or 128, not " + std::to_string(head_dim) +
                    ": change dim / n_heads or train with --device cpu");
    }
}

template <int D>
void attention_forward_d(float* out, float* lse, const float* q, const float* k, const float* v, int batch, int seq,
                         int heads, int kv_heads) {
    const dim3 grid(blocks_for(seq, kRows), batch * heads);
    const size_t shared = (kRows * (D + kOwnPad) + 2 * kTile * D) * sizeof(float);
    launch_with_shared(attention_forward_kernel<D>, grid, kRows, shared, "attention_forward_kernel", out, lse, q, k, v,
                       seq, heads, kv_heads, 1.0f / sqrtf(static_cast<float>(D)));
}

template <int D>
void attention_backward_d(float* dq, float* dk, float* dv, const float* dout, const float* lse, const float* q,
                          const float* k, const float* v, int batch, int seq, int heads, int kv_heads,
                          const float* delta) {
    const float scale = 1.0f / sqrtf(static_cast<float>(D));
    const size_t dq_shared = (2 * kRows * (D + kOwnPad) + 2 * kTile * D) * sizeof(float);
    launch_with_shared(attention_dq_kernel<D>, dim3(blocks_for(seq, kRows), batch * heads), kRows, dq_shared,
                       "attention_dq_kernel", dq, dout, lse, delta, q, k, v, seq, heads, kv_heads, scale);
    const size_t dkv_shared = (2 * kRows * (D + kOwnPad) + 2 * kTile * D + 2 * kTile) * sizeof(float);
    launch_with_shared(attention_dkv_kernel<D>, dim3(blocks_for(seq, kRows), batch * kv_heads), kRows, dkv_shared,
                       "attention_dkv_kernel", dk, dv, dout, lse, delta, q, k, v, seq, heads, kv_heads, scale);
}

}  // namespace

void rmsnorm_forward(float* y, float* rstd, const float* x, const float* gain, int rows, int cols, float eps) {
    rmsnorm_forward_kernel<<<rows, kThreads>>>(y, rstd, x, gain, cols, eps);
    check_launch("rmsnorm_forward_kernel");
}

size_t rmsnorm_scratch_floats(int rows, int cols) { return static_cast<size_t>(kGainChunks) * cols; }

void rmsnorm_backward(float* dx, float* dgain, const float* dy, const float* x, const float* gain, const float* rstd,
                      int rows, int cols, float* scratch) {
    rmsnorm_backward_input_kernel<<<rows, kThreads>>>(dx, dy, x, gain, rstd, cols);
    check_launch("rmsnorm_backward_input_kernel");
    rmsnorm_gain_partial_kernel<<<dim3(blocks_for(cols, kThreads), kGainChunks), kThreads>>>(scratch, dy, x, rstd, rows,
                                                                                             cols);
    check_launch("rmsnorm_gain_partial_kernel");
    rmsnorm_gain_sum_kernel<<<blocks_for(cols, kThreads), kThreads>>>(dgain, scratch, cols);
    check_launch("rmsnorm_gain_sum_kernel");
}

void rope_forward(float* x, int batch, int seq, int heads, int head_dim, const float* cos, const float* sin) {
    const size_t pairs = static_cast<size_t>(batch) * seq * heads * (head_dim / 2);
    rope_kernel<<<blocks_for(pairs, kThreads), kThreads>>>(x, pairs, seq, heads, head_dim / 2, cos, sin, 1.0f);
    check_launch("rope_kernel");
}

void rope_backward(float* dx, int batch, int seq, int heads, int head_dim, const float* cos, const float* sin) {
    const size_t pairs = static_cast<size_t>(batch) * seq * heads * (head_dim / 2);
    rope_kernel<<<blocks_for(pairs, kThreads), kThreads>>>(dx, pairs, seq, heads, head_dim / 2, cos, sin, -1.0f);
    check_launch("rope_kernel");
}

size_t sum_of_squares_scratch_doubles(size_t) { return kSquareBlocks; }

double sum_of_squares(const float* x, size_t count, double* scratch) {
    sum_of_squares_kernel<<<kSquareBlocks, kThreads>>>(scratch, x, count);
    check_launch("sum_of_squares_kernel");
    std::vector<double> partial(kSquareBlocks);
    copy_to_host(partial.data(), scratch, partial.size() * sizeof(double));
    double total = 0.0;
    for (double value : partial) total += value;
    return total;
}

void scale_in_place(float* x, float factor, size_t count) {
    scale_in_place_kernel<<<blocks_for(count, kThreads), kThreads>>>(x, factor, count);
    check_launch("scale_in_place_kernel");
}

void add_in_place(float* out, const float* in, size_t count) {
    add_in_place_kernel<<<blocks_for(count, kThreads), kThreads>>>(out, in, count);
    check_launch("add_in_place_kernel");
}

void swiglu_forward(float* h, const float* gate, const float* up, size_t count) {
    swiglu_forward_kernel<<<blocks_for(count, kThreads), kThreads>>>(h, gate, up, count);
    check_launch("swiglu_forward_kernel");
}

void swiglu_backward(float* dgate, float* dup, const float* dh, const float* gate, const float* up, size_t count) {
    swiglu_backward_kernel<<<blocks_for(count, kThreads), kThreads>>>(dgate, dup, dh, gate, up, count);
    check_launch("swiglu_backward_kernel");
}

double cross_entropy_forward_backward(float* dlogits, const float* logits, const int32_t* targets, int rows,
                                      int vocab, float grad_scale, float* row_loss) {
    cross_entropy_kernel<<<rows, kThreads>>>(dlogits, logits, targets, vocab, grad_scale, row_loss);
    check_launch("cross_entropy_kernel");
    std::vector<float> losses(static_cast<size_t>(rows));
    copy_to_host(losses.data(), row_loss, losses.size() * sizeof(float));
    double total = 0.0;
    for (float loss : losses) total += loss;
    return total;
}

void embedding_forward(float* out, const int32_t* tokens, const float* table, int count, int dim) {
    const size_t n = static_cast<size_t>(count) * dim;
    embedding_forward_kernel<<<blocks_for(n, kThreads), kThreads>>>(out, tokens, table, count, dim);
    check_launch("embedding_forward_kernel");
}

TokenGroups group_by_token(const int32_t* tokens, int count) {
    TokenGroups groups;
    groups.positions.resize(static_cast<size_t>(count));
    std::iota(groups.positions.begin(), groups.positions.end(), 0);
    std::stable_sort(groups.positions.begin(), groups.positions.end(),
                     [tokens](int32_t a, int32_t b) { return tokens[a] < tokens[b]; });
    for (int i = 0; i < count; ++i) {
        const int32_t token = tokens[groups.positions[static_cast<size_t>(i)]];
        if (groups.tokens.empty() || groups.tokens.back() != token) {
            groups.tokens.push_back(token);
            groups.starts.push_back(i);
        }
    }
    groups.starts.push_back(count);
    return groups;
}

void embedding_backward(float* dtable, const float* dout, const DeviceTokenGroups& groups, int dim) {
    if (groups.distinct == 0) return;
    const dim3 grid(static_cast<unsigned>(groups.distinct), (static_cast<unsigned>(dim) + kThreads - 1) / kThreads);
    embedding_backward_kernel<<<grid, kThreads>>>(dtable, dout, groups, dim);
    check_launch("embedding_backward_kernel");
}

void attention_forward(float* out, float* lse, const float* q, const float* k, const float* v, int batch, int seq,
                       int heads, int kv_heads, int head_dim) {
    check_attention_shape(heads, kv_heads, head_dim);
    if (head_dim == 32) attention_forward_d<32>(out, lse, q, k, v, batch, seq, heads, kv_heads);
    if (head_dim == 64) attention_forward_d<64>(out, lse, q, k, v, batch, seq, heads, kv_heads);
    if (head_dim == 128) attention_forward_d<128>(out, lse, q, k, v, batch, seq, heads, kv_heads);
}

void attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* out, const float* lse,
                        const float* q, const float* k, const float* v, int batch, int seq, int heads, int kv_heads,
                        int head_dim, float* delta) {
    check_attention_shape(heads, kv_heads, head_dim);
    const size_t rows = static_cast<size_t>(batch) * seq * heads;
    attention_delta_kernel<<<blocks_for(rows, kThreads), kThreads>>>(delta, dout, out, seq, heads, head_dim, rows);
    check_launch("attention_delta_kernel");
    if (head_dim == 32) attention_backward_d<32>(dq, dk, dv, dout, lse, q, k, v, batch, seq, heads, kv_heads, delta);
    if (head_dim == 64) attention_backward_d<64>(dq, dk, dv, dout, lse, q, k, v, batch, seq, heads, kv_heads, delta);
    if (head_dim == 128) attention_backward_d<128>(dq, dk, dv, dout, lse, q, k, v, batch, seq, heads, kv_heads, delta);
}

}  // namespace dqt::cuda
