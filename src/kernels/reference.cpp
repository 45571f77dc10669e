#include "kernels/reference.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

namespace dqt::ref {

void rmsnorm_forward(double* y, double* rstd, const double* x, const double* gain, int rows, int cols,
                     double eps) {
    for (int r = 0; r < rows; ++r) {
        const double* xr = x + static_cast<size_t>(r) * cols;
        double sum_sq = 0;
        for (int c = 0; c < cols; ++c) sum_sq += xr[c] * xr[c];
        rstd[r] = 1.0 / std::sqrt(sum_sq / cols + eps);
        for (int c = 0; c < cols; ++c) y[static_cast<size_t>(r) * cols + c] = xr[c] * rstd[r] * gain[c];
    }
}

void rmsnorm_backward(double* dx, double* dgain, const double* dy, const double* x, const double* gain,
                      const double* rstd, int rows, int cols) {
    // y_c = x_c * s * g_c with s = (mean(x^2) + eps)^(-1/2) and ds/dx_c = -s^3 * x_c / cols.
    for (int r = 0; r < rows; ++r) {
        const size_t base = static_cast<size_t>(r) * cols;
        const double s = rstd[r];
        double dot = 0;
        for (int c = 0; c < cols; ++c) dot += dy[base + c] * gain[c] * x[base + c];
        for (int c = 0; c < cols; ++c) {
            dx[base + c] += s * gain[c] * dy[base + c] - s * s * s * x[base + c] * dot / cols;
            dgain[c] += dy[base + c] * x[base + c] * s;
        }
    }
}

// Rotates each adjacent pair by sign * angle.
static void rope_rotate(double* x, int batch, int seq, int heads, int head_dim, int pos0, double theta,
                        double sign) {
    for (int b = 0; b < batch; ++b)
        for (int t = 0; t < seq; ++t)
            for (int h = 0; h < heads; ++h)
                for (int i = 0; i < head_dim / 2; ++i) {
                    const double angle = sign * (pos0 + t) * std::pow(theta, -2.0 * i / head_dim);
                    double* pair = x + ((static_cast<size_t>(b) * seq + t) * heads + h) * head_dim + 2 * i;
                    const double x0 = pair[0], x1 = pair[1];
                    pair[0] = x0 * std::cos(angle) - x1 * std::sin(angle);
                    pair[1] = x0 * std::sin(angle) + x1 * std::cos(angle);
                }
}

void rope_forward(double* x, int batch, int seq, int heads, int head_dim, int pos0, double theta) {
    rope_rotate(x, batch, seq, heads, head_dim, pos0, theta, 1.0);
}

void rope_backward(double* dx, int batch, int seq, int heads, int head_dim, int pos0, double theta) {
    // The rotation is orthogonal: its transpose is the rotation by the opposite angle.
    rope_rotate(dx, batch, seq, heads, head_dim, pos0, theta, -1.0);
}

namespace {
// Offsets into (batch, seq, n, head_dim) and (batch, heads, seq, seq) tensors.
struct AttentionIndex {
    int seq, heads, kv_heads, head_dim;
    size_t q(int b, int t, int h) const { return ((static_cast<size_t>(b) * seq + t) * heads + h) * head_dim; }
    size_t kv(int b, int t, int h) const {
        return ((static_cast<size_t>(b) * seq + t) * kv_heads + h / (heads / kv_heads)) * head_dim;
    }
    size_t p(int b, int h, int i, int j) const { return ((static_cast<size_t>(b) * heads + h) * seq + i) * seq + j; }
};
}  // namespace

void attention_forward(double* out, double* probs, const double* q, const double* k, const double* v,
                       int batch, int seq, int heads, int kv_heads, int head_dim) {
    const AttentionIndex at{seq, heads, kv_heads, head_dim};
    const double scale = 1.0 / std::sqrt(static_cast<double>(head_dim));
    std::vector<double> score(seq);
    for (int b = 0; b < batch; ++b)
        for (int h = 0; h < heads; ++h)
            for (int i = 0; i < seq; ++i) {
                double max_score = -INFINITY;
                for (int j = 0; j <= i; ++j) {
                    double s = 0;
                    for (int d = 0; d < head_dim; ++d) s += q[at.q(b, i, h) + d] * k[at.kv(b, j, h) + d];
                    score[j] = s * scale;
                    max_score = std::max(max_score, score[j]);
                }
                double sum = 0;
                for (int j = 0; j <= i; ++j) sum += std::exp(score[j] - max_score);
                for (int j = 0; j < seq; ++j)
                    probs[at.p(b, h, i, j)] = j <= i ? std::exp(score[j] - max_score) / sum : 0.0;
                for (int d = 0; d < head_dim; ++d) {
                    double o = 0;
                    for (int j = 0; j <= i; ++j) o += probs[at.p(b, h, i, j)] * v[at.kv(b, j, h) + d];
                    out[at.q(b, i, h) + d] = o;
                }
            }
}

void attention_backward(double* dq, double* dk, double* dv, const double* dout, const double* q,
                        const double* k, const double* v, const double* probs, int batch, int seq, int heads,
                        int kv_heads, int head_dim) {
    const AttentionIndex at{seq, heads, kv_heads, head_dim};
    const double scale = 1.0 / std::sqrt(static_cast<double>(head_dim));
    std::vector<double> dprob(seq);
    for (int b = 0; b < batch; ++b)
        for (int h = 0; h < heads; ++h)
            for (int i = 0; i < seq; ++i) {
                // out_i = sum_j p_ij v_j  =>  dv_j += p_ij dout_i, dp_ij = dout_i . v_j
                for (int j = 0; j <= i; ++j) {
                    const double p = probs[at.p(b, h, i, j)];
                    double dp = 0;
                    for (int d = 0; d < head_dim; ++d) {
                        dv[at.kv(b, j, h) + d] += p * dout[at.q(b, i, h) + d];
                        dp += dout[at.q(b, i, h) + d] * v[at.kv(b, j, h) + d];
                    }
                    dprob[j] = dp;
                }
                // Softmax backward: ds_ij = p_ij (dp_ij - sum_l p_il dp_il).
                double pdp = 0;
                for (int j = 0; j <= i; ++j) pdp += probs[at.p(b, h, i, j)] * dprob[j];
                for (int j = 0; j <= i; ++j) {
                    const double ds = probs[at.p(b, h, i, j)] * (dprob[j] - pdp) * scale;
                    for (int d = 0; d < head_dim; ++d) {
                        dq[at.q(b, i, h) + d] += ds * k[at.kv(b, j, h) + d];
                        dk[at.kv(b, j, h) + d] += ds * q[at.q(b, i, h) + d];
                    }
                }
            }
}

void swiglu_forward(double* h, const double* gate, const double* up, int64_t count) {
    for (int64_t i = 0; i < count; ++i) h[i] = gate[i] / (1.0 + std::exp(-gate[i])) * up[i];
}

void swiglu_backward(double* dgate, double* dup, const double* dh, const double* gate, const double* up,
                     int64_t count) {
    for (int64_t i = 0; i < count; ++i) {
        const double sig = 1.0 / (1.0 + std::exp(-gate[i]));
        // d silu(g) / dg = sig + g * sig * (1 - sig)
        dgate[i] += dh[i] * up[i] * (sig + gate[i] * sig * (1.0 - sig));
        dup[i] += dh[i] * gate[i] * sig;
    }
}

void relu2_glu_forward(double* h, const double* gate, const double* up, int64_t count) {
    for (int64_t i = 0; i < count; ++i) h[i] = (gate[i] > 0 ? gate[i] * gate[i] : 0.0) * up[i];
}

void relu2_glu_backward(double* dgate, double* dup, const double* dh, const double* gate, const double* up,
                        int64_t count) {
    for (int64_t i = 0; i < count; ++i) {
        const double r = gate[i] > 0 ? gate[i] : 0.0;
        dgate[i] += dh[i] * up[i] * 2.0 * r;
        dup[i] += dh[i] * r * r;
    }
}

double cross_entropy_forward_backward(double* dlogits, const double* logits, const int32_t* targets, int rows,
                                      int vocab, double grad_scale) {
    double loss = 0;
    for (int r = 0; r < rows; ++r) {
        const double* z = logits + static_cast<size_t>(r) * vocab;
        double max_z = -INFINITY;
        for (int c = 0; c < vocab; ++c) max_z = std::max(max_z, z[c]);
        double sum = 0;
        for (int c = 0; c < vocab; ++c) sum += std::exp(z[c] - max_z);
        loss += std::log(sum) + max_z - z[targets[r]];
        if (dlogits)
            for (int c = 0; c < vocab; ++c)
                dlogits[static_cast<size_t>(r) * vocab + c] =
                    grad_scale * (std::exp(z[c] - max_z) / sum - (c == targets[r] ? 1.0 : 0.0));
    }
    return loss;
}

void embedding_forward(double* out, const int32_t* tokens, const double* table, int count, int dim) {
    for (int t = 0; t < count; ++t)
        for (int c = 0; c < dim; ++c)
            out[static_cast<size_t>(t) * dim + c] = table[static_cast<size_t>(tokens[t]) * dim + c];
}

void embedding_backward(double* dtable, const double* dout, const int32_t* tokens, int count, int dim) {
    for (int t = 0; t < count; ++t)
        for (int c = 0; c < dim; ++c)
            dtable[static_cast<size_t>(tokens[t]) * dim + c] += dout[static_cast<size_t>(t) * dim + c];
}

}  // namespace dqt::ref
