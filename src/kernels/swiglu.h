#pragma once
// SwiGLU activation of the LLaMA FFN: h = silu(gate) * up, silu(g) = g * sigmoid(g).
#include <cstddef>

namespace dqt {

// h, gate, up (count), elementwise.
void swiglu_forward(float* h, const float* gate, const float* up, size_t count);
// The same on the calling thread only, for callers already inside a parallel region (an inner
// region, even of one thread, costs the runtime a team).
void swiglu_forward_serial(float* h, const float* gate, const float* up, size_t count);

// dgate += dL/dgate, dup += dL/dup (count), given dh = dL/dh.
void swiglu_backward(float* dgate, float* dup, const float* dh, const float* gate, const float* up, size_t count);

}  // namespace dqt
