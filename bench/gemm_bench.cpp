// Measures fp32 GEMM candidates on dqt's training shapes; the numbers and the choice are in
// docs/gemm.md. Two binaries are built from this file:
//   bench_gemm           dqt::gemm (the chosen implementation) and oneDNN's dnnl_sgemm called directly;
//   bench_gemm_openblas  OpenBLAS cblas_sgemm only (DQT_BENCH_OPENBLAS), in a process of its own so that
//                        OpenBLAS's spinning pthreads and OpenMP's never compete for the cores.
// Every figure is the best of many timed repetitions: the machine is shared, and the best run is
// the one least disturbed by others.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#ifdef DQT_BENCH_OPENBLAS
#include <cblas.h>
#include <unistd.h>
extern "C" void openblas_set_num_threads(int threads);
extern "C" char* openblas_get_corename(void);
#else
#include <oneapi/dnnl/dnnl.h>

#include "kernels/gemm.h"
#endif

namespace {

// Reference model: dim 256, 4 layers, 4 heads (head_dim 64), FFN 688, vocab 256, seq 256, batch 8.
constexpr int kTokens = 2048, kDim = 256, kFfn = 688, kSeq = 256, kHeadDim = 64, kLayers = 4;
constexpr int kBatchHeads = 8 * 4;

struct Shape {
    const char* name;
    bool trans_a, trans_b;
    int M, N, K;
    int lda, ldb, ldc;  // attention operands are head slices of (tokens, dim) rows
    float beta;         // backward products accumulate
    int calls_per_step; // in one training step of the reference model (attention: per (batch, head))
    bool per_head;      // called by each thread of a parallel loop over (batch, head)
};

Shape linear(const char* name, bool trans_a, bool trans_b, int M, int N, int K, float beta, int calls) {
    return {name, trans_a, trans_b, M, N, K, trans_a ? M : K, trans_b ? K : N, N, beta, calls, false};
}

// Per layer: 4 q/k/v/o + the lm_head once; 2 gate/up; 1 down. Forward out = in·W^T (NT),
// backward dIn += dOut·W (NN) and dW += dOut^T·in (TN).
const std::vector<Shape> kShapes = {
    linear("fwd q/k/v/o, lm_head", false, true, kTokens, kDim, kDim, 0, 4 * kLayers + 1),
    linear("fwd gate/up", false, true, kTokens, kFfn, kDim, 0, 2 * kLayers),
    linear("fwd down", false, true, kTokens, kDim, kFfn, 0, kLayers),
    linear("dIn q/k/v/o, lm_head", false, false, kTokens, kDim, kDim, 1, 4 * kLayers + 1),
    linear("dIn gate/up", false, false, kTokens, kDim, kFfn, 1, 2 * kLayers),
    linear("dIn down", false, false, kTokens, kFfn, kDim, 1, kLayers),
    linear("dW q/k/v/o, lm_head", true, false, kDim, kDim, kTokens, 1, 4 * kLayers + 1),
    linear("dW gate/up", true, false, kFfn, kDim, kTokens, 1, 2 * kLayers),
    linear("dW down", true, false, kDim, kFfn, kTokens, 1, kLayers),
    // Per (batch, head): scores Q·K^T and dP = dO·V^T; out P·V and dQ = dS·K; dV = P^T·dO and dK = dS^T·Q.
    {"att QK^T, dO V^T", false, true, kSeq, kSeq, kHeadDim, kDim, kDim, kSeq, 0, 2 * kLayers, true},
    {"att P V, dS K", false, false, kSeq, kHeadDim, kSeq, kSeq, kDim, kDim, 0, 2 * kLayers, true},
    {"att P^T dO, dS^T Q", true, false, kSeq, kHeadDim, kSeq, kSeq, kDim, kDim, 1, 2 * kLayers, true},
    linear("square 1024", false, false, 1024, 1024, 1024, 0, 0),
    linear("square 2048", false, false, 2048, 2048, 2048, 0, 0),
};

// One product's operands. Random in [-1, 1): no denormals, no overflow over repeated accumulation.
struct Operands {
    std::vector<float> a, b, c;
    Operands(const Shape& s, std::mt19937& rng) {
        std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
        a.resize(size_t(s.trans_a ? s.K : s.M) * s.lda);
        b.resize(size_t(s.trans_b ? s.N : s.K) * s.ldb);
        c.resize(size_t(s.M) * s.ldc);
        for (float& x : a) x = uniform(rng);
        for (float& x : b) x = uniform(rng);
    }
};

// A candidate multiplies one shape's operands on `threads` threads; inside a parallel region it
// must use only the calling thread.
using Candidate = std::function<void(const Shape&, Operands&, int threads)>;

#ifdef DQT_BENCH_OPENBLAS
void openblas_sgemm(const Shape& s, Operands& o, int threads) {
    openblas_set_num_threads(threads);
    cblas_sgemm(CblasRowMajor, s.trans_a ? CblasTrans : CblasNoTrans, s.trans_b ? CblasTrans : CblasNoTrans, s.M,
                s.N, s.K, 1.0f, o.a.data(), s.lda, o.b.data(), s.ldb, s.beta, o.c.data(), s.ldc);
}
const std::vector<std::pair<std::string, Candidate>> kCandidates = {{"openblas", openblas_sgemm}};
#else
void dqt_gemm(const Shape& s, Operands& o, int threads) {
    if (!omp_in_parallel()) omp_set_num_threads(threads);
    dqt::gemm(s.trans_a, s.trans_b, s.M, s.N, s.K, 1.0f, o.a.data(), s.lda, o.b.data(), s.ldb, s.beta, o.c.data(),
              s.ldc);
}
// oneDNN with its own threading: it reads omp_get_max_threads(), and runs on one thread when
// called inside a parallel region.
void dnnl_direct(const Shape& s, Operands& o, int threads) {
    if (!omp_in_parallel()) omp_set_num_threads(threads);
    dnnl_sgemm(s.trans_a ? 'T' : 'N', s.trans_b ? 'T' : 'N', s.M, s.N, s.K, 1.0f, o.a.data(), s.lda, o.b.data(),
               s.ldb, s.beta, o.c.data(), s.ldc);
}
const std::vector<std::pair<std::string, Candidate>> kCandidates = {{"dqt::gemm", dqt_gemm},
                                                                    {"dnnl_sgemm", dnnl_direct}};
#endif

double now_seconds() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Best seconds per call of `run` over 15 timed windows of >= 10 ms each, after one warm-up call.
double best_seconds(const std::function<void()>& run) {
    run();
    double best = 1e30;
    for (int window = 0; window < 15; ++window) {
        int calls = 0;
        const double start = now_seconds();
        double elapsed;
        do {
            run();
            ++calls;
            elapsed = now_seconds() - start;
        } while (elapsed < 0.01);
        best = std::min(best, elapsed / calls);
    }
    return best;
}

double flops(const Shape& s) { return 2.0 * s.M * s.N * s.K; }

// GFLOP/s of one shape on `threads` threads. Per-head shapes run as in attention: a parallel
// loop over (batch, head), each iteration a single-threaded product on its own operands.
double measure(const Shape& s, const Candidate& candidate, int threads, std::vector<Operands>& heads) {
    if (!s.per_head) return flops(s) / best_seconds([&] { candidate(s, heads[0], threads); }) * 1e-9;
    const double seconds = best_seconds([&] {
#pragma omp parallel for num_threads(threads) schedule(static)
        for (int h = 0; h < kBatchHeads; ++h) candidate(s, heads[h], 1);
    });
    return kBatchHeads * flops(s) / seconds * 1e-9;
}

#ifndef DQT_BENCH_OPENBLAS
// "same" when the candidate gives identical bits on 1 and 2 threads for this shape (beta = 0).
const char* bits_1_vs_2(const Shape& s, const Candidate& candidate, Operands& o) {
    Shape fresh = s;
    fresh.beta = 0;
    std::vector<float> results[2];
    for (int threads : {1, 2}) {
        std::fill(o.c.begin(), o.c.end(), 0.0f);
        candidate(fresh, o, threads);
        results[threads - 1] = o.c;
    }
    return results[0] == results[1] ? "same" : "DIFFER";
}
#endif

}  // namespace

int main(int argc, char** argv) {
#ifdef DQT_BENCH_OPENBLAS
    // OpenBLAS picks its kernels when the library loads, before main: set the core type and
    // re-execute. Pass --autodetect to keep OpenBLAS's own detection.
    const bool autodetect = argc > 1 && std::strcmp(argv[1], "--autodetect") == 0;
    if (!autodetect && !std::getenv("OPENBLAS_CORETYPE")) {
        setenv("OPENBLAS_CORETYPE", "SkylakeX", 1);
        execv("/proc/self/exe", argv);
    }
    std::printf("OpenBLAS core: %s\n", openblas_get_corename());
#endif
    std::mt19937 rng(12345);
    std::printf("%-22s %-5s %-15s", "shape", "op", "M x N x K");
    for (const auto& [name, candidate] : kCandidates) std::printf(" %11s/1t %11s/2t", name.c_str(), name.c_str());
#ifndef DQT_BENCH_OPENBLAS
    for (const auto& [name, candidate] : kCandidates) std::printf(" %10s 1v2", name.c_str());
#endif
    std::printf("\n");

    std::vector<std::vector<double>> step_seconds(kCandidates.size(), std::vector<double>(2, 0.0));
    for (const Shape& s : kShapes) {
        std::vector<Operands> heads;
        for (int h = 0; h < (s.per_head ? kBatchHeads : 1); ++h) heads.emplace_back(s, rng);
        char op[3] = {s.trans_a ? 'T' : 'N', s.trans_b ? 'T' : 'N', 0};
        std::printf("%-22s %-5s %4dx%4dx%4d ", s.name, op, s.M, s.N, s.K);
        for (size_t c = 0; c < kCandidates.size(); ++c) {
            for (int threads : {1, 2}) {
                const double gflops = measure(s, kCandidates[c].second, threads, heads);
                const double calls = s.per_head ? double(s.calls_per_step) * kBatchHeads : s.calls_per_step;
                step_seconds[c][threads - 1] += calls * flops(s) / (gflops * 1e9);
                std::printf(" %14.1f", gflops);
            }
        }
#ifndef DQT_BENCH_OPENBLAS
        for (const auto& [name, candidate] : kCandidates) std::printf(" %14s", bits_1_vs_2(s, candidate, heads[0]));
#endif
        std::printf("\n");
        std::fflush(stdout);
    }
    std::printf("\nGEMM time of one training step (ms), from the rates above:\n");
    for (size_t c = 0; c < kCandidates.size(); ++c)
        std::printf("  %-12s 1 thread %7.1f   2 threads %7.1f\n", kCandidates[c].first.c_str(),
                    step_seconds[c][0] * 1e3, step_seconds[c][1] * 1e3);
#ifndef DQT_BENCH_OPENBLAS
    for (int threads : {1, 2}) {
        const double start = now_seconds();
        const double peak = dqt::measure_gemm_peak_gflops(threads);
        std::printf("measure_gemm_peak_gflops(%d) = %.1f GFLOP/s in %.2f s\n", threads, peak, now_seconds() - start);
    }
#endif
    return 0;
}
