#pragma once
// Causal attention on the tensor cores, for bf16 compute. Each product is a batched cuBLASLt
// GEMM over every (batch, head) at once: the scores S = scale * Q K^T of a chunk of query rows
// (fp32 sums, in GPU memory: at most about 512 MiB per chunk, whatever the batch and sequence),
// the softmax in fp32, the probabilities P rounded to bf16, then P V. Q, K, V, dout, P and the
// backward's dS are bf16 operands with fp32 sums, as every bf16 product of dqt. The backward
// recomputes S and P from the saved log-sum-exp (nothing T x T is kept between the passes) and
// takes each row's delta = sum_j P_j dP_j from the bf16 P it multiplies, so the gradient is that
// of the rounded forward. Keys past a chunk's last query are never multiplied (causal).
//
// Shapes as cuda/kernels.h's attention: q (B, T, H, D), k and v (B, T, Hkv, D), out (B, T, H, D),
// lse (B, H, T); H a multiple of Hkv; D a multiple of 8.
#include "cuda/gemm.h"

namespace dqt::cuda {

// max_chunk_rows: 0 chooses (the memory bound above, and at least four chunks for the causal
// saving); tests pass small values to cover chunk edges.
void attention_tc_forward(const Gemm& gemm, float* out, float* lse, const float* q, const float* k, const float* v,
                          int batch, int seq, int heads, int kv_heads, int head_dim, int max_chunk_rows = 0);
// dq, dk, dv += gradients.
void attention_tc_backward(const Gemm& gemm, float* dq, float* dk, float* dv, const float* dout, const float* lse,
                           const float* q, const float* k, const float* v, int batch, int seq, int heads, int kv_heads,
                           int head_dim, int max_chunk_rows = 0);

}  // namespace dqt::cuda
