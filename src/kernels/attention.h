#pragma once
// Causal scaled-dot-product attention with grouped-query support: query head h reads kv head
// h / (heads / kv_heads); scores are scaled by 1 / sqrt(head_dim). Forward work is split over
// (batch, head) pairs and backward work over (batch, kv head) pairs, each owned by one thread
// and computed in a fixed order, so results are bit-identical for any thread count.
#include <cstddef>

namespace dqt {

// q (batch, seq, heads, head_dim); k, v (batch, seq, kv_heads, head_dim); heads % kv_heads == 0.
// out (batch, seq, heads, head_dim) written; probs (batch, heads, seq, seq) written with the
// causal softmax (zero above the diagonal), saved for backward.
void attention_forward(float* out, float* probs, const float* q, const float* k, const float* v, int batch,
                       int seq, int heads, int kv_heads, int head_dim);

// Floats the caller must provide as dscores_scratch of attention_backward: one (seq, seq)
// matrix per (batch, head), i.e. batch * heads * seq * seq, the size of probs. (Per-thread
// buffers of O(seq * head_dim) are allocated inside, as accounted scratch.)
size_t attention_backward_scratch_floats(int batch, int seq, int heads);

// dq (batch, seq, heads, head_dim) +=, dk, dv (batch, seq, kv_heads, head_dim) +=, given
// dout (batch, seq, heads, head_dim) and the forward's inputs and probs.
// dscores_scratch: attention_backward_scratch_floats(batch, seq, heads) floats, contents
// undefined on entry and exit.
void attention_backward(float* dq, float* dk, float* dv, float* dscores_scratch, const float* dout,
                        const float* q, const float* k, const float* v, const float* probs, int batch, int seq,
                        int heads, int kv_heads, int head_dim);

// One generation step with a KV cache: the new token at position pos attends to cache rows
// 0..pos (row pos already holds its own key and value).
// q (heads, head_dim); k_cache, v_cache (max_seq, kv_heads, head_dim) with max_seq > pos;
// out (heads, head_dim) written. Equals row pos of attention_forward over the same keys, up to
// float rounding.
void attention_decode(float* out, const float* q, const float* k_cache, const float* v_cache, int pos,
                      int heads, int kv_heads, int head_dim);

}  // namespace dqt
