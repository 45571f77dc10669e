#pragma once
// Plain, obviously-correct double-precision versions of every non-GEMM kernel. They are the
// yardstick for the fast float kernels in tests and are never used for training. Shapes and
// conventions match the fast kernels (see their headers); backward functions accumulate.
#include <cstdint>

namespace dqt::ref {

void rmsnorm_forward(double* y, double* rstd, const double* x, const double* gain, int rows, int cols,
                     double eps);  // x, y (rows, cols); rstd (rows); gain (cols)
void rmsnorm_backward(double* dx, double* dgain, const double* dy, const double* x, const double* gain,
                      const double* rstd, int rows, int cols);

// Adjacent-pair RoPE on x (batch, seq, heads, head_dim), token t at position pos0 + t.
void rope_forward(double* x, int batch, int seq, int heads, int head_dim, int pos0, double theta);
void rope_backward(double* dx, int batch, int seq, int heads, int head_dim, int pos0, double theta);

// Causal attention. q (batch, seq, heads, head_dim); k, v (batch, seq, kv_heads, head_dim);
// out (batch, seq, heads, head_dim); probs (batch, heads, seq, seq), zero above the diagonal.
void attention_forward(double* out, double* probs, const double* q, const double* k, const double* v,
                       int batch, int seq, int heads, int kv_heads, int head_dim);
void attention_backward(double* dq, double* dk, double* dv, const double* dout, const double* q,
                        const double* k, const double* v, const double* probs, int batch, int seq, int heads,
                        int kv_heads, int head_dim);

void swiglu_forward(double* h, const double* gate, const double* up, int64_t count);
void swiglu_backward(double* dgate, double* dup, const double* dh, const double* gate, const double* up,
                     int64_t count);
void relu2_glu_forward(double* h, const double* gate, const double* up, int64_t count);
void relu2_glu_backward(double* dgate, double* dup, const double* dh, const double* gate, const double* up,
                        int64_t count);

// Returns the summed NLL over rows; writes dlogits = grad_scale * (softmax - onehot) if non-null.
double cross_entropy_forward_backward(double* dlogits, const double* logits, const int32_t* targets, int rows,
                                      int vocab, double grad_scale);

void embedding_forward(double* out, const int32_t* tokens, const double* table, int count, int dim);
void embedding_backward(double* dtable, const double* dout, const int32_t* tokens, int count, int dim);

}  // namespace dqt::ref
