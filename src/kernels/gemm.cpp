#include "kernels/gemm.h"

#include <oneapi/dnnl/dnnl.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/error.h"

namespace dqt {
namespace {

// The chunking rule sees only the shape, never the thread count: the longer side of C is cut
// into at most kMaxChunks equal parts. Parts shorter than kMinChunkSide make the per-call
// repacking of the other operand dominate; parts under kMinChunkFlops (~20 us) are not worth a
// thread. Eight chunks keep two threads balanced; more would cost repacking (docs/gemm.md).
constexpr int kMaxChunks = 8;
constexpr int kMinChunkSide = 64;
constexpr double kMinChunkFlops = 2e6;

int chunk_count(int M, int N, int K) {
    const double by_flops = 2.0 * M * N * K / kMinChunkFlops;
    const int by_side = std::max(M, N) / kMinChunkSide;
    return std::max(1, std::min({kMaxChunks, by_side, static_cast<int>(std::min(by_flops, double(kMaxChunks)))}));
}

void check_arguments(bool trans_a, bool trans_b, int M, int N, int K, int lda, int ldb, int ldc) {
    require(M >= 0 && N >= 0 && K >= 0,
            "gemm: negative size M=" + std::to_string(M) + " N=" + std::to_string(N) + " K=" + std::to_string(K));
    require(lda >= std::max(1, trans_a ? M : K), "gemm: lda=" + std::to_string(lda) + " is smaller than a row of A");
    require(ldb >= std::max(1, trans_b ? K : N), "gemm: ldb=" + std::to_string(ldb) + " is smaller than a row of B");
    require(ldc >= std::max(1, N), "gemm: ldc=" + std::to_string(ldc) + " is smaller than a row of C");
}

// Runs on one thread: the caller has limited OpenMP to one thread here. Arguments were
// validated, so a failure is a bug; it cannot propagate as an exception out of a parallel region.
void sgemm_one_thread(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A, int lda,
                      const float* B, int ldb, float beta, float* C, int ldc) {
    const dnnl_status_t status = dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', M, N, K, alpha, A, lda, B,
                                            ldb, beta, C, ldc);
    if (status != dnnl_success) {
        std::fprintf(stderr, "dqt: internal error: dnnl_sgemm failed with status %d\n", static_cast<int>(status));
        std::abort();
    }
}

}  // namespace

void gemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A, int lda, const float* B,
          int ldb, float beta, float* C, int ldc) {
    check_arguments(trans_a, trans_b, M, N, K, lda, ldb, ldc);
    if (M == 0 || N == 0) return;
    if (K == 0) {  // C = beta C, which oneDNN's AVX2 sgemm skips (it leaves C as it was)
        for (int i = 0; i < M; ++i)
            for (int j = 0; j < N; ++j) {
                float& c = C[int64_t(i) * ldc + j];
                c = beta == 0 ? 0.0f : beta * c;
            }
        return;
    }
    const int chunks = chunk_count(M, N, K);
    const bool split_rows = M >= N;
    const int side = split_rows ? M : N;
    const int threads = omp_in_parallel() ? 1 : std::min(omp_get_max_threads(), chunks);
#pragma omp parallel num_threads(threads)
    {
        // Affects only this thread's nested regions: oneDNN must not fork again inside a chunk.
        omp_set_num_threads(1);
#pragma omp for schedule(static)
        for (int c = 0; c < chunks; ++c) {
            const int lo = static_cast<int>(int64_t(side) * c / chunks);
            const int hi = static_cast<int>(int64_t(side) * (c + 1) / chunks);
            if (split_rows) {  // rows lo..hi of op(A) and C
                const float* a = trans_a ? A + lo : A + int64_t(lo) * lda;
                sgemm_one_thread(trans_a, trans_b, hi - lo, N, K, alpha, a, lda, B, ldb, beta, C + int64_t(lo) * ldc,
                                 ldc);
            } else {  // columns lo..hi of op(B) and C
                const float* b = trans_b ? B + int64_t(lo) * ldb : B + lo;
                sgemm_one_thread(trans_a, trans_b, M, hi - lo, K, alpha, A, lda, b, ldb, beta, C + lo, ldc);
            }
        }
    }
}

void gemm_reference(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A, int lda,
                    const float* B, int ldb, float beta, float* C, int ldc) {
    check_arguments(trans_a, trans_b, M, N, K, lda, ldb, ldc);
    for (int i = 0; i < M; ++i) {
        for (int j = 0; j < N; ++j) {
            double sum = 0;
            for (int k = 0; k < K; ++k) {
                const double a = trans_a ? A[int64_t(k) * lda + i] : A[int64_t(i) * lda + k];
                const double b = trans_b ? B[int64_t(j) * ldb + k] : B[int64_t(k) * ldb + j];
                sum += a * b;
            }
            float& c = C[int64_t(i) * ldc + j];
            c = static_cast<float>(alpha * sum + (beta == 0 ? 0.0 : double(beta) * c));
        }
    }
}

double measure_gemm_peak_gflops(int threads) {
    // One whole 2048^3 product (17 GFLOP, 0.1-0.4 s) straight through oneDNN, threaded by oneDNN
    // itself: the best this machine's sgemm does, not dqt::gemm's chunks, whose per-chunk
    // repacking costs a square product half its rate on AVX2 (docs/gemm.md). Plain vectors:
    // a one-off measurement, not part of any memory category.
    constexpr int n = 2048;
    std::vector<float> a(size_t(n) * n), b(size_t(n) * n), c(size_t(n) * n);
    for (size_t i = 0; i < a.size(); ++i) {
        a[i] = float(int(i % 17) - 8) * 0.01f;
        b[i] = float(int(i % 13) - 6) * 0.01f;
    }
    const int saved_threads = omp_get_max_threads();
    omp_set_num_threads(std::max(1, threads));
    double best_seconds = 1e30;
    for (int run = 0; run < 4; ++run) {  // the first run warms caches and oneDNN's JIT
        const auto start = std::chrono::steady_clock::now();
        const dnnl_status_t status = dnnl_sgemm('N', 'N', n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);
        const std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - start;
        require(status == dnnl_success, "GEMM peak: dnnl_sgemm failed with status " + std::to_string(int(status)));
        if (run > 0) best_seconds = std::min(best_seconds, elapsed.count());
    }
    omp_set_num_threads(saved_threads);
    return 2.0 * n * n * n / best_seconds * 1e-9;
}

}  // namespace dqt
