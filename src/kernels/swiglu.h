#pragma once
// The gated activations of the FFN: h = act(gate) * up, with
//   silu   SwiGLU (LLaMA): act(g) = g * sigmoid(g)
//   relu2  ReLU^2-GLU (BitNet b1.58 2B4T): act(g) = max(g, 0)^2
#include <cstddef>
#include <string>

namespace dqt {

// h, gate, up (count), elementwise.
void swiglu_forward(float* h, const float* gate, const float* up, size_t count);
// The same on the calling thread only, for callers already inside a parallel region (an inner
// region, even of one thread, costs the runtime a team).
void swiglu_forward_serial(float* h, const float* gate, const float* up, size_t count);

// dgate += dL/dgate, dup += dL/dup (count), given dh = dL/dh.
void swiglu_backward(float* dgate, float* dup, const float* dh, const float* gate, const float* up, size_t count);

// The same three for ReLU^2-GLU.
void relu2_glu_forward(float* h, const float* gate, const float* up, size_t count);
void relu2_glu_forward_serial(float* h, const float* gate, const float* up, size_t count);
void relu2_glu_backward(float* dgate, float* dup, const float* dh, const float* gate, const float* up, size_t count);

enum class GatedActivation { silu, relu2 };
// "silu" or "relu2"; dqt::Error naming both otherwise.
GatedActivation parse_gated_activation(const std::string& name);
const char* gated_activation_name(GatedActivation activation);
// The activation's forward, serial forward and backward, chosen by `activation`.
void gated_forward(GatedActivation activation, float* h, const float* gate, const float* up, size_t count);
void gated_forward_serial(GatedActivation activation, float* h, const float* gate, const float* up, size_t count);
void gated_backward(GatedActivation activation, float* dgate, float* dup, const float* dh, const float* gate,
                    const float* up, size_t count);

}  // namespace dqt
