// dqt's int8 product (kernels/int8_matmul.h: the 8-bit path of inference, and the int8 head)
// against oneDNN's int8 GEMM (dnnl_gemm_s8s8s32 from Debian's libdnnl) on the same operands, in
// one process, at the shapes of BitNet b1.58 2B4T: its 128,256-entry head (128,256 x 2560) and
// its FFN (6912 x 2560 and 2560 x 6912), with 1 to 128 activation rows (a decode step, steps of
// several served streams, a prompt chunk), on 1 and 2 threads. Each matrix is replicated until
// the copies span 4x the last-level cache (1 GiB where its size cannot be read: 4x the largest
// met here, 260 MiB), so every pass reads its weights from memory. Both
// engines' int32 sums go through the same float epilogue, so their outputs must agree bit for
// bit (checked for every shape); each time is the best of 5 passes, with a pass of the read
// bandwidth beyond the cache between them (the bound a one-row product is held to).
//
//   build/bench_int8_onednn          threads 1 and 2
//   build/bench_int8_onednn 2        the given thread counts
#include <omp.h>
#include <oneapi/dnnl/dnnl.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "core/cpu_cache.h"
#include "kernels/int8_matmul.h"
#include "kernels/read_bandwidth.h"

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

struct Shape {
    const char* name;
    int rows, cols;  // of the weight
};

// out (x.rows, w.rows) = the same product as dqt::int8_matmul, through oneDNN: int32 sums of
// x (M = x.rows, K) times w^T (w is N = w.rows rows of K), then dqt's epilogue. sums: M x N.
void onednn_int8_matmul(const dqt::Int8Matrix& w, const dqt::Int8Rows& x, float* out, std::vector<int32_t>& sums) {
    const int32_t no_offset = 0;
    const dnnl_status_t status =
        dnnl_gemm_s8s8s32('N', 'T', 'F', x.rows, w.rows, w.padded_cols, 1.0f, x.values.data(), x.padded_cols, 0,
                          w.values.data(), w.padded_cols, 0, 0.0f, sums.data(), w.rows, &no_offset);
    if (status != dnnl_success) {
        std::fprintf(stderr, "bench_int8_onednn: dnnl_gemm_s8s8s32 failed with status %d\n", static_cast<int>(status));
        std::exit(1);
    }
#pragma omp parallel for schedule(static)
    for (int r = 0; r < x.rows; ++r) {
        const float factor = dqt::int8_output_factor(w.scale, x.scales[r]);
        for (int o = 0; o < w.rows; ++o) {
            const size_t i = static_cast<size_t>(r) * w.rows + o;
            out[i] = factor * static_cast<float>(sums[i]);
        }
    }
}

}  // namespace

int main(int argc, char** argv) {
    std::vector<int> thread_counts = {1, 2};
    if (argc > 1) {
        thread_counts.clear();
        for (int i = 1; i < argc; ++i) {
            const int threads = std::atoi(argv[i]);
            if (threads < 1 || threads > 256) {
                std::fprintf(stderr, "bench_int8_onednn: a thread count is 1 to 256, not '%s'\n", argv[i]);
                return 1;
            }
            thread_counts.push_back(threads);
        }
    }
    const std::vector<Shape> shapes = {{"2B4T head", 128256, 2560}, {"2B4T ffn_up", 6912, 2560}, {"2B4T ffn_down", 2560, 6912}};
    const std::vector<int> row_counts = {1, 4, 8, 16, 32, 64, 128};
    const uint64_t cache = dqt::last_level_cache_bytes();
    const uint64_t span = cache > 0 ? 4 * cache : uint64_t{1} << 30;
    std::mt19937 rng(1);
    std::uniform_int_distribution<int> code(-128, 127);
    std::uniform_real_distribution<float> value(-1.0f, 1.0f);
    if (cache > 0) {
        std::printf("bench_int8_onednn: last-level cache %.1f MiB; weights replicated to span 4x it\n", cache / 1048576.0);
    } else {
        std::printf("bench_int8_onednn: last-level cache size unreadable (no sysfs cache folder); weights replicated to span 1 GiB\n");
    }
    std::printf("%-14s %5s %7s %6s %11s %11s %9s %12s %13s %7s\n", "shape", "rows", "threads", "copies", "dqt ms",
                "oneDNN ms", "dqt speedup", "dqt GB/s", "of read bound", "equal");
    for (const Shape& shape : shapes) {
        const uint64_t matrix_bytes = static_cast<uint64_t>(shape.rows) * dqt::int8_padded_cols(shape.cols);
        const int copies = static_cast<int>(std::max<uint64_t>(1, (span + matrix_bytes - 1) / matrix_bytes));
        std::vector<dqt::Int8Matrix> weights;
        for (int c = 0; c < copies; ++c) {
            std::vector<int8_t> q(static_cast<size_t>(shape.rows) * shape.cols);
            for (int8_t& v : q) v = static_cast<int8_t>(code(rng));
            weights.push_back(dqt::pack_int8(q.data(), shape.rows, shape.cols, 0.01f));
        }
        for (const int threads : thread_counts) {
            omp_set_num_threads(threads);
            dqt::ReadBandwidth bandwidth(cache);
            for (int pass = 0; pass < 3; ++pass) bandwidth.measure_pass();
            for (const int rows : row_counts) {
                std::vector<float> x(static_cast<size_t>(rows) * shape.cols);
                for (float& v : x) v = value(rng);
                dqt::Int8Rows activations;
                dqt::quantize_rows_int8(x.data(), rows, shape.cols, activations);
                const size_t out_count = static_cast<size_t>(rows) * shape.rows;
                std::vector<float> ours(out_count), theirs(out_count);
                std::vector<int32_t> sums(out_count);
                double best_ours = 1e30, best_theirs = 1e30;
                for (int repeat = 0; repeat < 5; ++repeat) {
                    bandwidth.measure_pass();
                    auto start = Clock::now();
                    for (const dqt::Int8Matrix& w : weights) dqt::int8_matmul(w, activations, ours.data());
                    best_ours = std::min(best_ours, seconds_since(start));
                    start = Clock::now();
                    for (const dqt::Int8Matrix& w : weights) onednn_int8_matmul(w, activations, theirs.data(), sums);
                    best_theirs = std::min(best_theirs, seconds_since(start));
                }
                const bool equal = std::memcmp(ours.data(), theirs.data(), out_count * sizeof(float)) == 0;
                const double bytes = static_cast<double>(matrix_bytes) * copies;
                std::printf("%-14s %5d %7d %6d %11.3f %11.3f %9.2fx %12.1f %12.0f%% %7s\n", shape.name, rows, threads,
                            copies, 1e3 * best_ours / copies, 1e3 * best_theirs / copies, best_theirs / best_ours,
                            bytes / best_ours / 1e9, 100.0 * bytes / best_ours / bandwidth.bytes_per_second(),
                            equal ? "yes" : "NO");
            }
            std::printf("read bound, %d thread%s (best pass over %.0f MiB): %.1f GB/s\n", threads, threads > 1 ? "s" : "",
                        bandwidth.buffer_bytes() / 1048576.0, bandwidth.bytes_per_second() / 1e9);
        }
    }
    return 0;
}
