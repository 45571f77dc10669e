#pragma once
// fp32 matrix multiply for training, on oneDNN's single-threaded sgemm (docs/gemm.md has the
// measurements behind the choice). C is cut into chunks by a rule that depends only on
// (M, N, K), each chunk is one single-threaded sgemm, and threads share out whole chunks: every
// output element is computed by the same code on the same operands whatever the thread count,
// so results are bit-identical for 1, 2 or any number of threads, and inside or outside a
// parallel region.

namespace dqt {

// C (M, N) = alpha * op(A) * op(B) + beta * C, all row-major.
// op(A) is (M, K): A is (M, K) with leading dimension lda, or (K, M) if trans_a.
// op(B) is (K, N): B is (K, N) with leading dimension ldb, or (N, K) if trans_b.
// C is not read when beta == 0. Uses all current OpenMP threads when called outside a parallel
// region and only the calling thread inside one. Throws dqt::Error on invalid sizes.
void gemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A, int lda, const float* B,
          int ldb, float beta, float* C, int ldc);

// Same contract, a plain triple loop accumulating in double: the slow oracle for tests.
void gemm_reference(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A, int lda,
                    const float* B, int ldb, float beta, float* C, int ldc);

// Best GFLOP/s of a few 2048^3 products through oneDNN's sgemm on `threads` threads (the
// caller's OpenMP thread setting is restored). The denominator of "fraction of GEMM peak";
// takes 0.5-1.5 s.
double measure_gemm_peak_gflops(int threads);

}  // namespace dqt
