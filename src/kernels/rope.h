#pragma once
// Rotary position embedding, adjacent-pair convention (Meta LLaMA, llama.cpp "norm" mode):
// the pair (x[2i], x[2i+1]) of every head is rotated by angle pos * theta^(-2i / head_dim).
#include "core/memory.h"

namespace dqt {

// cos and sin of every (position, pair) angle for positions pos0 .. pos0 + seq - 1, computed
// in double: a call builds one for its rows, and an inference session one for its whole
// context (the same values for the same position, so the same rotations).
struct RopeTable {
    int positions = 0, head_dim = 0;
    Array<float> cos, sin;  // (positions, head_dim / 2), category scratch
    // dqt::Error for an odd head_dim.
    RopeTable(int seq, int head_dim, int pos0, float theta);
};

// In place on x (batch, seq, heads, head_dim); token t sits at position pos0 + t. head_dim even.
void rope_forward(float* x, int batch, int seq, int heads, int head_dim, int pos0, float theta);
// In place on heads [head_begin, head_end) of x: seq rows row_stride floats apart, head h of a
// row at h * table.head_dim; token t rotated by table row first_row + t. On the calling thread
// (inference splits heads over its own threads).
void rope_forward_heads(float* x, int seq, size_t row_stride, int head_begin, int head_end, const RopeTable& table,
                        int first_row);

// In place on the gradient dx (batch, seq, heads, head_dim): the rotation is orthogonal, so
// its backward is the rotation by the opposite angle.
void rope_backward(float* dx, int batch, int seq, int heads, int head_dim, int pos0, float theta);

}  // namespace dqt
