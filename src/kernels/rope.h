#pragma once
// Rotary position embedding, adjacent-pair convention (Meta LLaMA, llama.cpp "norm" mode):
// the pair (x[2i], x[2i+1]) of every head is rotated by angle pos * theta^(-2i / head_dim).
namespace dqt {

// In place on x (batch, seq, heads, head_dim); token t sits at position pos0 + t. head_dim even.
void rope_forward(float* x, int batch, int seq, int heads, int head_dim, int pos0, float theta);

// In place on the gradient dx (batch, seq, heads, head_dim): the rotation is orthogonal, so
// its backward is the rotation by the opposite angle.
void rope_backward(float* dx, int batch, int seq, int heads, int head_dim, int pos0, float theta);

}  // namespace dqt
