// Each GPU kernel (cuda/kernels.h, cuda/gemm.h) against its CPU reference (src/kernels/) on
// fresh random inputs. fp32 on both sides, summed in other orders: a tensor may differ by 1e-5
// of its largest magnitude (about 100 fp32 roundings of the largest term); a wrong index, sign
// or missing term moves values by far more.
#include "cuda/gemm.h"
#include "cuda/kernels.h"
#include "cuda/quantize.h"
#include "cuda_test_support.h"
#include "kernels/attention.h"
#include "kernels/cross_entropy.h"
#include "kernels/embedding.h"
#include "kernels/rmsnorm.h"
#include "kernels/rope.h"
#include "kernels/swiglu.h"
#include "quant/bf16.h"
#include "quant/ternary.h"

using namespace dqt;
using namespace dqt::cuda::testing;
namespace gpu = dqt::cuda;

namespace {

constexpr double kTolerance = 1e-5;

class GpuKernels : public Gpu {
protected:
    std::mt19937_64 rng{test_seed()};
};

}  // namespace

TEST_F(GpuKernels, RmsNormForwardAndBackwardMatchTheCpu) {
    const int rows = 300, cols = 200;
    const auto x = random_floats(rng, rows * cols), gain = random_floats(rng, cols), dy = random_floats(rng, rows * cols);
    std::vector<float> y(rows * cols), rstd(rows), dx = random_floats(rng, rows * cols), dgain = random_floats(rng, cols);
    auto d_x = upload(x), d_gain = upload(gain), d_dy = upload(dy), d_dx = upload(dx), d_dgain = upload(dgain);
    rmsnorm_forward(y.data(), rstd.data(), x.data(), gain.data(), rows, cols, 1e-6f);
    rmsnorm_backward(dx.data(), dgain.data(), dy.data(), x.data(), gain.data(), rstd.data(), rows, cols);
    gpu::DeviceArray<float> d_y(MemCategory::scratch, y.size()), d_rstd(MemCategory::scratch, rows),
        scratch(MemCategory::scratch, gpu::rmsnorm_scratch_floats(rows, cols));
    gpu::rmsnorm_forward(d_y.data(), d_rstd.data(), d_x.data(), d_gain.data(), rows, cols, 1e-6f);
    gpu::rmsnorm_backward(d_dx.data(), d_dgain.data(), d_dy.data(), d_x.data(), d_gain.data(), d_rstd.data(), rows, cols,
                          scratch.data());
    EXPECT_LT(relative_error(download(d_y), y), kTolerance);
    EXPECT_LT(relative_error(download(d_rstd), rstd), kTolerance);
    EXPECT_LT(relative_error(download(d_dx), dx), kTolerance);
    EXPECT_LT(relative_error(download(d_dgain), dgain), kTolerance);
}

TEST_F(GpuKernels, RopeForwardAndBackwardMatchTheCpu) {
    const int batch = 2, seq = 50, heads = 3, head_dim = 16;
    const float theta = 10000.0f;
    auto x = random_floats(rng, static_cast<size_t>(batch) * seq * heads * head_dim);
    const RopeTable table(seq, head_dim, 0, theta);
    auto d_cos = gpu::to_device(MemCategory::scratch, table.cos.data(), table.cos.size());
    auto d_sin = gpu::to_device(MemCategory::scratch, table.sin.data(), table.sin.size());
    auto d_x = upload(x), d_dx = upload(x);
    rope_forward(x.data(), batch, seq, heads, head_dim, 0, theta);
    gpu::rope_forward(d_x.data(), batch, seq, heads, head_dim, d_cos.data(), d_sin.data());
    EXPECT_LT(relative_error(download(d_x), x), kTolerance);
    auto dx = download(d_dx);
    rope_backward(dx.data(), batch, seq, heads, head_dim, 0, theta);
    gpu::rope_backward(d_dx.data(), batch, seq, heads, head_dim, d_cos.data(), d_sin.data());
    EXPECT_LT(relative_error(download(d_dx), dx), kTolerance);
}

TEST_F(GpuKernels, SwigluForwardAndBackwardMatchTheCpu) {
    const size_t count = 10007;
    const auto gate = random_floats(rng, count, 3.0f), up = random_floats(rng, count), dh = random_floats(rng, count);
    std::vector<float> h(count), dgate = random_floats(rng, count), dup = random_floats(rng, count);
    auto d_gate = upload(gate), d_up = upload(up), d_dh = upload(dh), d_dgate = upload(dgate), d_dup = upload(dup);
    gpu::DeviceArray<float> d_h(MemCategory::scratch, count);
    swiglu_forward(h.data(), gate.data(), up.data(), count);
    swiglu_backward(dgate.data(), dup.data(), dh.data(), gate.data(), up.data(), count);
    gpu::swiglu_forward(d_h.data(), d_gate.data(), d_up.data(), count);
    gpu::swiglu_backward(d_dgate.data(), d_dup.data(), d_dh.data(), d_gate.data(), d_up.data(), count);
    EXPECT_LT(relative_error(download(d_h), h), kTolerance);
    EXPECT_LT(relative_error(download(d_dgate), dgate), kTolerance);
    EXPECT_LT(relative_error(download(d_dup), dup), kTolerance);
}

TEST_F(GpuKernels, CrossEntropyMatchesTheCpu) {
    const int rows = 70, vocab = 5003;
    const auto logits = random_floats(rng, static_cast<size_t>(rows) * vocab, 4.0f);
    std::vector<int32_t> targets(rows);
    for (int32_t& t : targets) t = static_cast<int32_t>(rng() % vocab);
    std::vector<float> dlogits(logits.size());
    const float loss = cross_entropy_forward_backward(dlogits.data(), logits.data(), targets.data(), rows, vocab, 0.01f);
    auto d_logits = upload(logits);
    auto d_targets = upload(targets);
    gpu::DeviceArray<float> row_loss(MemCategory::scratch, rows);
    // In place, as the training pass runs it.
    const double gpu_loss = gpu::cross_entropy_forward_backward(d_logits.data(), d_logits.data(), d_targets.data(), rows,
                                                                vocab, 0.01f, row_loss.data());
    EXPECT_NEAR(gpu_loss, loss, 1e-5 * loss);
    EXPECT_LT(relative_error(download(d_logits), dlogits), kTolerance);
}

TEST_F(GpuKernels, EmbeddingForwardAndBackwardMatchTheCpu) {
    const int vocab = 50, dim = 24, count = 300;  // tokens repeat: the backward adds into shared rows
    const auto table = random_floats(rng, static_cast<size_t>(vocab) * dim), dout = random_floats(rng, count * dim);
    std::vector<int32_t> tokens(count);
    for (int32_t& t : tokens) t = static_cast<int32_t>(rng() % vocab);
    std::vector<float> out(count * dim), dtable = random_floats(rng, table.size());
    auto d_table = upload(table), d_dout = upload(dout), d_dtable = upload(dtable);
    auto d_tokens = upload(tokens);
    gpu::DeviceArray<float> d_out(MemCategory::scratch, out.size());
    embedding_forward(out.data(), tokens.data(), table.data(), count, dim);
    embedding_backward(dtable.data(), dout.data(), tokens.data(), count, dim);
    gpu::embedding_forward(d_out.data(), d_tokens.data(), d_table.data(), count, dim);
    const gpu::TokenGroups groups = gpu::group_by_token(tokens.data(), count);
    auto d_group_tokens = upload(groups.tokens), d_starts = upload(groups.starts), d_positions = upload(groups.positions);
    gpu::embedding_backward(d_dtable.data(), d_dout.data(),
                            {d_group_tokens.data(), d_starts.data(), d_positions.data(),
                             static_cast<int>(groups.tokens.size())},
                            dim);
    EXPECT_EQ(download(d_out), out);
    // Each row's additions in position order, as the CPU makes them: the same bits.
    EXPECT_EQ(download(d_dtable), dtable);
}

// Against the CPU's attention, which materialises the probabilities: sequences that end inside
// a tile, grouped query heads, every supported head size.
TEST_F(GpuKernels, AttentionForwardAndBackwardMatchTheCpu) {
    for (const auto& [seq, heads, kv_heads, head_dim] : std::vector<std::array<int, 4>>{
             {77, 4, 2, 32}, {130, 2, 2, 64}, {45, 4, 1, 128}}) {
        SCOPED_TRACE("seq " + std::to_string(seq) + ", heads " + std::to_string(heads) + "/" + std::to_string(kv_heads) +
                     ", head_dim " + std::to_string(head_dim));
        const int batch = 2;
        const size_t q_count = static_cast<size_t>(batch) * seq * heads * head_dim;
        const size_t kv_count = static_cast<size_t>(batch) * seq * kv_heads * head_dim;
        const auto q = random_floats(rng, q_count), k = random_floats(rng, kv_count), v = random_floats(rng, kv_count);
        const auto dout = random_floats(rng, q_count);
        std::vector<float> out(q_count), probs(static_cast<size_t>(batch) * heads * seq * seq);
        attention_forward(out.data(), probs.data(), q.data(), k.data(), v.data(), batch, seq, heads, kv_heads, head_dim);
        std::vector<float> dq(q_count), dk(kv_count), dv(kv_count);
        std::vector<float> scratch(attention_backward_scratch_floats(batch, seq, heads));
        attention_backward(dq.data(), dk.data(), dv.data(), scratch.data(), dout.data(), q.data(), k.data(), v.data(),
                           probs.data(), batch, seq, heads, kv_heads, head_dim);

        auto d_q = upload(q), d_k = upload(k), d_v = upload(v), d_dout = upload(dout);
        gpu::DeviceArray<float> d_out(MemCategory::scratch, q_count), lse(MemCategory::scratch, batch * heads * seq),
            delta(MemCategory::scratch, batch * heads * seq), d_dq(MemCategory::scratch, q_count),
            d_dk(MemCategory::scratch, kv_count), d_dv(MemCategory::scratch, kv_count);
        d_dq.zero();
        d_dk.zero();
        d_dv.zero();
        gpu::attention_forward(d_out.data(), lse.data(), d_q.data(), d_k.data(), d_v.data(), batch, seq, heads, kv_heads,
                               head_dim);
        gpu::attention_backward(d_dq.data(), d_dk.data(), d_dv.data(), d_dout.data(), d_out.data(), lse.data(),
                                d_q.data(), d_k.data(), d_v.data(), batch, seq, heads, kv_heads, head_dim, delta.data());
        EXPECT_LT(relative_error(download(d_out), out), kTolerance);
        EXPECT_LT(relative_error(download(d_dq), dq), kTolerance);
        EXPECT_LT(relative_error(download(d_dk), dk), kTolerance);
        EXPECT_LT(relative_error(download(d_dv), dv), kTolerance);
    }
}

// bitnet's gamma: mean |w| in double on both sides, in different orders; the floats agree (see
// cuda/quantize.h) from one element to more than the block limit's worth.
TEST_F(GpuKernels, MeanAbsIsTheCpusFloat) {
    for (const size_t count : {size_t{1}, size_t{1000}, size_t{589824}, size_t{1572864}, size_t{9437184}}) {
        SCOPED_TRACE(count);
        const auto w = random_floats(rng, count, 0.02f);
        auto d_w = upload(w);
        gpu::DeviceArray<double> scratch(MemCategory::scratch, gpu::mean_abs_scratch_doubles(count));
        gpu::DeviceArray<float> mean(MemCategory::scratch, 1);
        gpu::mean_abs(mean.data(), d_w.data(), count, scratch.data());
        EXPECT_EQ(download(mean)[0], static_cast<float>(mean_abs(w.data(), count)));
    }
}

// The three products of a linear layer (forward, input and weight gradients), in fp32 against a
// float64 product, and in bf16 against the float64 product of the bf16-rounded operands.
TEST_F(GpuKernels, GemmMatchesAFloat64ProductInBothPrecisions) {
    const int m = 67, n = 45, k = 129;
    const gpu::Gemm gemm;
    for (const auto& [transpose_a, transpose_b] : std::vector<std::pair<bool, bool>>{{false, true}, {false, false}, {true, false}}) {
        for (bool bf16 : {false, true}) {
            SCOPED_TRACE(std::string(bf16 ? "bf16" : "fp32") + (transpose_a ? ", a^T" : "") + (transpose_b ? ", b^T" : ""));
            auto a = random_floats(rng, static_cast<size_t>(m) * k), b = random_floats(rng, static_cast<size_t>(k) * n);
            auto c = random_floats(rng, static_cast<size_t>(m) * n);
            if (bf16) {
                for (float& x : a) x = round_to_bf16(x);
                for (float& x : b) x = round_to_bf16(x);
            }
            std::vector<float> expected(c.size());
            for (int i = 0; i < m; ++i) {
                for (int j = 0; j < n; ++j) {
                    double sum = 0.5 * c[static_cast<size_t>(i) * n + j];  // beta = 0.5
                    for (int p = 0; p < k; ++p) {
                        const float a_ip = transpose_a ? a[static_cast<size_t>(p) * m + i] : a[static_cast<size_t>(i) * k + p];
                        const float b_pj = transpose_b ? b[static_cast<size_t>(j) * k + p] : b[static_cast<size_t>(p) * n + j];
                        sum += static_cast<double>(a_ip) * b_pj;
                    }
                    expected[static_cast<size_t>(i) * n + j] = static_cast<float>(sum);
                }
            }
            auto d_a = upload(a), d_b = upload(b), d_c = upload(c);
            gpu::DeviceArray<uint16_t> a16(MemCategory::scratch, a.size()), b16(MemCategory::scratch, b.size());
            gpu::GemmOperand op_a{d_a.data(), false}, op_b{d_b.data(), false};
            if (bf16) {
                gpu::round_to_bf16(a16.data(), d_a.data(), a.size());
                gpu::round_to_bf16(b16.data(), d_b.data(), b.size());
                op_a = {a16.data(), true};
                op_b = {b16.data(), true};
            }
            gemm.multiply(op_a, transpose_a, op_b, transpose_b, d_c.data(), m, n, k, 0.5f);
            EXPECT_LT(relative_error(download(d_c), expected), kTolerance);
        }
    }
}

// Every allocation is in the ledger, by category, and leaves it when freed.
TEST_F(GpuKernels, DeviceMemoryIsAccountedByCategory) {
    const int64_t before = gpu::device_live_bytes(MemCategory::activations);
    {
        gpu::DeviceArray<float> a(MemCategory::activations, 1 << 20);
        EXPECT_EQ(gpu::device_live_bytes(MemCategory::activations), before + (4 << 20));
        EXPECT_GE(gpu::device_peak_bytes(MemCategory::activations), before + (4 << 20));
        EXPECT_GT(gpu::driver_memory().used, size_t{4} << 20);
    }
    EXPECT_EQ(gpu::device_live_bytes(MemCategory::activations), before);
}

TEST_F(GpuKernels, AnAllocationTooLargeIsOneLineError) {
    try {
        gpu::DeviceArray<float> huge(MemCategory::activations, size_t{1} << 42);  // 16 TiB
        FAIL() << "no error";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("out of GPU memory"), std::string::npos) << e.what();
        EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos);
    }
}

// Without a GPU (CI's machines), asking for one is a one-line error that says what to do.
TEST(GpuAbsent, RequireGpuIsAOneLineError) {
    if (gpu::gpu_count() > 0) GTEST_SKIP() << "a GPU is present";
    try {
        gpu::require_gpu();
        FAIL() << "no error";
    } catch (const Error& e) {
        const std::string message = e.what();
        EXPECT_NE(message.find("no CUDA GPU"), std::string::npos) << message;
        EXPECT_NE(message.find("--device cpu"), std::string::npos) << message;
        EXPECT_EQ(message.find('\n'), std::string::npos);
    }
}
