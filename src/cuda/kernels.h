#pragma once
// The training pass's kernels on the GPU, fp32, one function per CPU kernel of src/kernels/
// with the same arguments as device pointers and the same semantics (backward functions add
// into their outputs). tests/cuda/ compares each with its CPU reference on fresh random inputs.
#include <cstddef>
#include <cstdint>
#include <vector>

namespace dqt::cuda {

// y (rows, cols) = x * rstd * gain, rstd (rows) = 1 / sqrt(mean(x^2) + eps).
void rmsnorm_forward(float* y, float* rstd, const float* x, const float* gain, int rows, int cols, float eps);
// dx += RMSNorm backward; dgain += sum over rows of dy * x * rstd. scratch: rmsnorm_scratch_floats.
void rmsnorm_backward(float* dx, float* dgain, const float* dy, const float* x, const float* gain, const float* rstd,
                      int rows, int cols, float* scratch);
size_t rmsnorm_scratch_floats(int rows, int cols);

// In place on x (batch, seq, heads, head_dim), adjacent pairs rotated by the angles of
// cos, sin (seq, head_dim / 2) (kernels/rope.h's RopeTable, copied to the device); backward
// rotates by the opposite angle.
void rope_forward(float* x, int batch, int seq, int heads, int head_dim, const float* cos, const float* sin);
void rope_backward(float* dx, int batch, int seq, int heads, int head_dim, const float* cos, const float* sin);

// sum of x[i]^2 in double (scratch: sum_of_squares_scratch_doubles(count)); waits for the result.
double sum_of_squares(const float* x, size_t count, double* scratch);
size_t sum_of_squares_scratch_doubles(size_t count);
// x[i] *= factor.
void scale_in_place(float* x, float factor, size_t count);

// out[i] += in[i] (the residual stream).
void add_in_place(float* out, const float* in, size_t count);

// h = silu(gate) * up; backward adds into dgate, dup.
void swiglu_forward(float* h, const float* gate, const float* up, size_t count);
void swiglu_backward(float* dgate, float* dup, const float* dh, const float* gate, const float* up, size_t count);

// Summed cross-entropy (nats) of rows of logits (rows, vocab) against targets; with dlogits
// (may alias logits), also writes grad_scale * (softmax - onehot). row_loss: (rows) scratch.
double cross_entropy_forward_backward(float* dlogits, const float* logits, const int32_t* targets, int rows,
                                      int vocab, float grad_scale, float* row_loss);

// out (count, dim) = table rows tokens[i].
void embedding_forward(float* out, const int32_t* tokens, const float* table, int count, int dim);

// A micro-batch's positions grouped by token, built on the host: group r is token tokens[r], at
// positions positions[starts[r] .. starts[r + 1]) in increasing order. The embedding backward
// adds each group's rows in that order, so a run repeats bit for bit (atomics would add a
// repeated token's rows in whatever order the threads ran).
struct TokenGroups {
    std::vector<int32_t> tokens;     // (distinct)
    std::vector<int32_t> starts;     // (distinct + 1)
    std::vector<int32_t> positions;  // (count)
};
TokenGroups group_by_token(const int32_t* tokens, int count);
// The same on the device (pointers into device memory).
struct DeviceTokenGroups {
    const int32_t* tokens;
    const int32_t* starts;
    const int32_t* positions;
    int distinct;
};
// dtable rows += dout (count, dim) rows, each token's rows added in position order.
void embedding_backward(float* dtable, const float* dout, const DeviceTokenGroups& groups, int dim);

// Causal attention without the (T, T) matrix (flash-style: online softmax over key tiles,
// recomputed in backward from the saved log-sum-exp). q (B, T, H, D), k and v (B, T, Hkv, D),
// out (B, T, H, D), lse (B, H, T). head_dim 32, 64 or 128; H a multiple of Hkv.
void attention_forward(float* out, float* lse, const float* q, const float* k, const float* v, int batch, int seq,
                       int heads, int kv_heads, int head_dim);
// dq, dk, dv += gradients. delta: (B, H, T) scratch.
void attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* out, const float* lse,
                        const float* q, const float* k, const float* v, int batch, int seq, int heads, int kv_heads,
                        int head_dim, float* delta);

}  // namespace dqt::cuda
