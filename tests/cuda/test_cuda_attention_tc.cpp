// The tensor-core attention (cuda/attention_tc.h) against a float64 reference that rounds the
// same operands to bf16 (q, k, v, dout, the probabilities P and dS), on fresh random inputs,
// over chunkings that split rows mid-head, ragged key counts, GQA and head sizes off the fp32
// kernels' three. What is left between the two sides: fp32 sums in other orders, and now and
// then a probability whose fp32 value lies within rounding error of a bf16 boundary rounded to
// the other neighbour (one part in 256 of one term): 2e-3 of the largest magnitude covers that,
// a wrong mask, a missed chunk or a wrong scale moves values by 1e-1 or more. The reference
// itself is checked against the CPU's fp32 attention on the same rounded inputs (within the
// bf16 rounding of P and dS: 3e-2).
#include <cmath>

#include "cuda/attention_tc.h"
#include "cuda_test_support.h"
#include "kernels/attention.h"
#include "quant/bf16.h"

using namespace dqt;
using namespace dqt::cuda::testing;
namespace gpu = dqt::cuda;

namespace {

struct Case {
    int seq, heads, kv_heads, head_dim, max_chunk_rows;
};

float bf16(double x) { return round_to_bf16(static_cast<float>(x)); }

// What attention_tc computes, in float64 with its bf16 roundings. Inputs already bf16-rounded.
struct Reference {
    std::vector<float> out, lse, dq, dk, dv;

    Reference(const Case& c, int batch, const std::vector<float>& q, const std::vector<float>& k,
              const std::vector<float>& v, const std::vector<float>& dout) {
        const int T = c.seq, H = c.heads, G = c.heads / c.kv_heads, D = c.head_dim;
        const double scale = 1.0 / std::sqrt(static_cast<double>(D));
        out.assign(q.size(), 0.0f);
        dq.assign(q.size(), 0.0f);
        dk.assign(k.size(), 0.0f);
        dv.assign(v.size(), 0.0f);
        lse.assign(static_cast<size_t>(batch) * H * T, 0.0f);
        auto q_at = [&](int b, int t, int h) { return &q[((static_cast<size_t>(b) * T + t) * H + h) * D]; };
        auto kv_at = [&](const std::vector<float>& x, int b, int t, int h) {
            return &x[((static_cast<size_t>(b) * T + t) * c.kv_heads + h / G) * D];
        };
        auto dot = [D](const float* a, const float* b) {
            double sum = 0.0;
            for (int d = 0; d < D; ++d) sum += static_cast<double>(a[d]) * b[d];
            return sum;
        };
        std::vector<double> s(T), p(T);
        for (int b = 0; b < batch; ++b) {
            for (int h = 0; h < H; ++h) {
                for (int t = 0; t < T; ++t) {
                    double best = -INFINITY, sum = 0.0;
                    for (int j = 0; j <= t; ++j) best = std::max(best, s[j] = scale * dot(q_at(b, t, h), kv_at(k, b, j, h)));
                    for (int j = 0; j <= t; ++j) sum += std::exp(s[j] - best);
                    const double row_lse = best + std::log(sum);
                    lse[(static_cast<size_t>(b) * H + h) * T + t] = static_cast<float>(row_lse);
                    const size_t row = (static_cast<size_t>(b) * T + t) * H + h;
                    double delta = 0.0;
                    std::vector<double> dp(t + 1);
                    for (int j = 0; j <= t; ++j) {
                        p[j] = bf16(std::exp(s[j] - row_lse));
                        dp[j] = dot(&dout[row * D], kv_at(v, b, j, h));
                        delta += p[j] * dp[j];
                    }
                    for (int d = 0; d < D; ++d) {
                        double o = 0.0;
                        for (int j = 0; j <= t; ++j) o += p[j] * kv_at(v, b, j, h)[d];
                        out[row * D + d] = static_cast<float>(o);
                    }
                    for (int j = 0; j <= t; ++j) {
                        const double ds = bf16(scale * p[j] * (dp[j] - delta));
                        const size_t kv_row = (static_cast<size_t>(b) * T + j) * c.kv_heads + h / G;
                        for (int d = 0; d < D; ++d) {
                            dq[row * D + d] += static_cast<float>(ds * kv_at(k, b, j, h)[d]);
                            dk[kv_row * D + d] += static_cast<float>(ds * q[row * D + d]);
                            dv[kv_row * D + d] += static_cast<float>(p[j] * dout[row * D + d]);
                        }
                    }
                }
            }
        }
    }
};

class GpuAttentionTc : public Gpu {
protected:
    std::mt19937_64 rng{test_seed()};

    std::vector<float> rounded(size_t count) {
        std::vector<float> x = random_floats(rng, count);
        for (float& value : x) value = round_to_bf16(value);
        return x;
    }
};

std::vector<float> plus(const std::vector<float>& a, const std::vector<float>& b) {
    std::vector<float> sum(a.size());
    for (size_t i = 0; i < a.size(); ++i) sum[i] = a[i] + b[i];
    return sum;
}

}  // namespace

TEST_F(GpuAttentionTc, MatchesABf16RoundedReferenceOverChunkings) {
    const gpu::Gemm gemm;
    const int batch = 2;
    for (const Case& c : std::vector<Case>{{77, 4, 2, 32, 24}, {130, 2, 2, 64, 0}, {45, 4, 1, 128, 13},
                                           {200, 2, 1, 40, 0}, {33, 3, 3, 64, 100}}) {
        SCOPED_TRACE("seq " + std::to_string(c.seq) + ", heads " + std::to_string(c.heads) + "/" +
                     std::to_string(c.kv_heads) + ", head_dim " + std::to_string(c.head_dim) + ", chunk " +
                     std::to_string(c.max_chunk_rows));
        const size_t q_count = static_cast<size_t>(batch) * c.seq * c.heads * c.head_dim;
        const size_t kv_count = static_cast<size_t>(batch) * c.seq * c.kv_heads * c.head_dim;
        const auto q = rounded(q_count), k = rounded(kv_count), v = rounded(kv_count), dout = rounded(q_count);
        const Reference want(c, batch, q, k, v, dout);

        // The reference is attention: against the CPU's fp32 attention on the same inputs.
        std::vector<float> out(q_count), probs(static_cast<size_t>(batch) * c.heads * c.seq * c.seq);
        attention_forward(out.data(), probs.data(), q.data(), k.data(), v.data(), batch, c.seq, c.heads, c.kv_heads,
                          c.head_dim);
        std::vector<float> dq(q_count), dk(kv_count), dv(kv_count);
        std::vector<float> scratch(attention_backward_scratch_floats(batch, c.seq, c.heads));
        attention_backward(dq.data(), dk.data(), dv.data(), scratch.data(), dout.data(), q.data(), k.data(), v.data(),
                           probs.data(), batch, c.seq, c.heads, c.kv_heads, c.head_dim);
        EXPECT_LT(relative_error(want.out, out), 3e-2);
        EXPECT_LT(relative_error(want.dq, dq), 3e-2);
        EXPECT_LT(relative_error(want.dk, dk), 3e-2);
        EXPECT_LT(relative_error(want.dv, dv), 3e-2);

        // The GPU adds its gradients into what the buffers hold.
        const auto dq0 = random_floats(rng, q_count), dk0 = random_floats(rng, kv_count), dv0 = random_floats(rng, kv_count);
        auto d_q = upload(q), d_k = upload(k), d_v = upload(v), d_dout = upload(dout);
        auto d_dq = upload(dq0), d_dk = upload(dk0), d_dv = upload(dv0);
        gpu::DeviceArray<float> d_out(MemCategory::scratch, q_count), d_lse(MemCategory::scratch, want.lse.size());
        gpu::attention_tc_forward(gemm, d_out.data(), d_lse.data(), d_q.data(), d_k.data(), d_v.data(), batch, c.seq,
                                  c.heads, c.kv_heads, c.head_dim, c.max_chunk_rows);
        gpu::attention_tc_backward(gemm, d_dq.data(), d_dk.data(), d_dv.data(), d_dout.data(), d_lse.data(), d_q.data(),
                                   d_k.data(), d_v.data(), batch, c.seq, c.heads, c.kv_heads, c.head_dim,
                                   c.max_chunk_rows);
        const double out_error = relative_error(download(d_out), want.out);
        const double lse_error = relative_error(download(d_lse), want.lse);
        const double dq_error = relative_error(download(d_dq), plus(dq0, want.dq));
        const double dk_error = relative_error(download(d_dk), plus(dk0, want.dk));
        const double dv_error = relative_error(download(d_dv), plus(dv0, want.dv));
        EXPECT_LT(out_error, 2e-3);
        EXPECT_LT(lse_error, 1e-5);
        EXPECT_LT(dq_error, 2e-3);
        EXPECT_LT(dk_error, 2e-3);
        EXPECT_LT(dv_error, 2e-3);
        std::printf("seq %d heads %d/%d D %d chunk %d: out %.1e lse %.1e dq %.1e dk %.1e dv %.1e\n", c.seq, c.heads,
                    c.kv_heads, c.head_dim, c.max_chunk_rows, out_error, lse_error, dq_error, dk_error, dv_error);
    }
}

TEST_F(GpuAttentionTc, RefusesAHeadSizeTheTensorCoresCannotTake) {
    const gpu::Gemm gemm;
    gpu::DeviceArray<float> x(MemCategory::scratch, 2 * 4 * 2 * 12), lse(MemCategory::scratch, 2 * 4 * 2);
    EXPECT_THROW(gpu::attention_tc_forward(gemm, x.data(), lse.data(), x.data(), x.data(), x.data(), 2, 4, 2, 2, 12),
                 Error);
    EXPECT_THROW(gpu::attention_tc_forward(gemm, x.data(), lse.data(), x.data(), x.data(), x.data(), 2, 4, 3, 2, 8),
                 Error);
}
