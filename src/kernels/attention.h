#pragma once
// Causal scaled-dot-product attention with grouped-query support: query head h reads kv head
// h / (heads / kv_heads); scores are scaled by 1 / sqrt(head_dim). Forward work is split over
// (batch, head) pairs and backward work over (batch, kv head) pairs, each owned by one thread
// and computed in a fixed order, so results are bit-identical for any thread count.
#include <cstddef>
#include <cstdint>

#include "core/float16.h"

namespace dqt {

// q (batch, seq, heads, head_dim); k, v (batch, seq, kv_heads, head_dim); heads % kv_heads == 0.
// out (batch, seq, heads, head_dim) written; probs (batch, heads, seq, seq) written with the
// causal softmax (zero above the diagonal), saved for backward; probs may be null (inference:
// no backward), which gives the same out bit for bit without the (seq, seq) matrices.
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

// A KV cache for attention_decode keeps each kv head's keys and values contiguous, as fp32,
// fp16 (Float16, half the bytes a decode step reads) or int8 codes with scales (Int8Codes below).
// Keys in tiles of kAttentionKeyTile positions, each tile transposed: keys (kv_heads, key_stride
// / kAttentionKeyTile, head_dim, kAttentionKeyTile), key j of head h, dimension d at [h *
// head_dim * key_stride + ((j / kAttentionKeyTile) * head_dim + d) * kAttentionKeyTile + j %
// kAttentionKeyTile]; values (kv_heads, value_stride, head_dim). Decode at pos then reads one
// contiguous run of keys and one of values per head.
inline constexpr int kAttentionKeyTile = 64;
int attention_key_stride(int max_seq);  // max_seq rounded up to kAttentionKeyTile
// Rows of each kv head's values for max_seq positions: max_seq, and more where head_dim is not
// a multiple of decode's widest vector (16 floats), whose reads run past a row's end: enough
// that those past the last row stay in their own head, which no other thread writes.
int attention_value_stride(int max_seq, int head_dim);
// An int8 cache's keys or values: codes in the layout above, and one fp32 scale per kv head and
// position (the position's head_dim entries are code x scale, the scale 1/127 of their largest
// magnitude): scales (kv_heads, key_stride) for keys, (kv_heads, value_stride) for values. A
// quarter of fp32's bytes, plus 4 per head and position.
struct Int8Codes {
    int8_t* codes;
    float* scales;
};
// Writes kv heads [head_begin, head_end) of keys k and values v (count, kv_heads, head_dim) at
// positions first_pos .. first_pos + count - 1.
void store_keys_and_values(float* keys, int key_stride, float* values, int value_stride, const float* k,
                           const float* v, int first_pos, int count, int kv_heads, int head_dim, int head_begin,
                           int head_end);
void store_keys_and_values(Float16* keys, int key_stride, Float16* values, int value_stride, const float* k,
                           const float* v, int first_pos, int count, int kv_heads, int head_dim, int head_begin,
                           int head_end);
void store_keys_and_values(Int8Codes keys, int key_stride, Int8Codes values, int value_stride, const float* k,
                           const float* v, int first_pos, int count, int kv_heads, int head_dim, int head_begin,
                           int head_end);

// One generation step: the token at position pos attends to cache positions 0..pos (pos
// already holds its own key and value). q, out (heads, head_dim); query heads [head_begin,
// head_end) are computed, on the calling thread. Equals row pos of attention_forward over the
// same keys and values bit for bit (the same multiply-add chains). With AVX-512, a kv head's
// query heads go four at a time, sharing each load of a key or value.
void attention_decode(float* out, const float* q, const float* keys, int key_stride, const float* values,
                      int value_stride, int pos, int heads, int kv_heads, int head_dim, int head_begin, int head_end);
void attention_decode(float* out, const float* q, const Float16* keys, int key_stride, const Float16* values,
                      int value_stride, int pos, int heads, int kv_heads, int head_dim, int head_begin, int head_end);
// An int8 cache: each score is the codes' dot product times its key's scale, and each value's
// weight its probability times the value's scale (not the fp32 bits of the dequantized cache).
void attention_decode(float* out, const float* q, Int8Codes keys, int key_stride, Int8Codes values,
                      int value_stride, int pos, int heads, int kv_heads, int head_dim, int head_begin, int head_end);

// attention_decode of `rows` query rows of one sequence at positions first_pos .. first_pos +
// rows - 1, all already in the cache (a prompt's chunk after its start): row i of q and out
// (row_stride floats apart) attends to positions 0 .. first_pos + i, with attention_decode's
// bits. With AVX-512, four rows share each load of a key or value.
void attention_decode_rows(float* out, const float* q, int row_stride, const float* keys, int key_stride,
                           const float* values, int value_stride, int first_pos, int rows, int heads, int kv_heads,
                           int head_dim, int head_begin, int head_end);
void attention_decode_rows(float* out, const float* q, int row_stride, const Float16* keys, int key_stride,
                           const Float16* values, int value_stride, int first_pos, int rows, int heads, int kv_heads,
                           int head_dim, int head_begin, int head_end);
void attention_decode_rows(float* out, const float* q, int row_stride, Int8Codes keys, int key_stride,
                           Int8Codes values, int value_stride, int first_pos, int rows, int heads, int kv_heads,
                           int head_dim, int head_begin, int head_end);

}  // namespace dqt
