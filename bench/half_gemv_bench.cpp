// The rate at which the fp16 decode product (kernels/half_gemv.h) reads its weights from
// memory, beside the read limit measured in the same process: BitNet b1.58 2B4T's tied head
// (128,256 rows of 2,560 fp16 weights, 657 MB, several times any last-level cache met here) on
// every instruction-set path this CPU has, one activation row, --threads threads each taking
// its contiguous share of the rows (as the inference session splits a product). The timed
// passes alternate with the read limit's. Every path's outputs are checked against the
// reference on the first rows first.
//
//   build/bench_half_gemv                         the 2B4T head, one thread
//   build/bench_half_gemv --threads 2 --passes 8
//   build/bench_half_gemv --rows 32000 --cols 4096
//   build/bench_half_gemv --rows 64 --passes 20   from L2: what the loop's arithmetic allows
//
// docs/results.md ("The fp16 head on AVX2") holds its figures.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <new>
#include <random>
#include <string>
#include <vector>

#include "core/cpu_cache.h"
#include "core/memory.h"
#include "kernels/half_gemv.h"
#include "kernels/read_bandwidth.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Options {
    int rows = 128256, cols = 2560, threads = 1, passes = 5;
};

Options parse(int argc, char** argv) {
    Options options;
    for (int i = 1; i < argc; i += 2) {  // each flag, then its value
        const std::string flag = argv[i];
        int* target = flag == "--rows"      ? &options.rows
                      : flag == "--cols"    ? &options.cols
                      : flag == "--threads" ? &options.threads
                      : flag == "--passes"  ? &options.passes
                                            : nullptr;
        if (target == nullptr) {
            std::fprintf(stderr, "bench_half_gemv: unknown flag %s (--rows, --cols, --threads, --passes)\n", flag.c_str());
            std::exit(2);
        }
        char* end = nullptr;
        const long value = i + 1 < argc ? std::strtol(argv[i + 1], &end, 10) : 0;
        if (i + 1 >= argc || *end != '\0' || value <= 0 || value > 1000000000) {
            std::fprintf(stderr, "bench_half_gemv: %s needs a positive integer up to 10^9\n", flag.c_str());
            std::exit(2);
        }
        *target = static_cast<int>(value);
    }
    return options;
}

// Seconds of one product over every row, the rows split among the team as the inference
// session does; a matrix under 64 MiB is swept that often over, so that a pass is long enough
// to time (it then reads from the cache).
double timed_pass(const Options& o, const float* x, const dqt::Float16* w, float* out, dqt::HalfIsa isa) {
    const double bytes = static_cast<double>(o.rows) * o.cols * sizeof(dqt::Float16);
    const int sweeps = std::max(1, static_cast<int>(64.0 * (1 << 20) / bytes));
    const auto start = Clock::now();
#pragma omp parallel
    {
        const int t = omp_get_thread_num(), team = omp_get_num_threads();
        const int first = static_cast<int>(static_cast<long>(o.rows) * t / team);
        const int last = static_cast<int>(static_cast<long>(o.rows) * (t + 1) / team);
        for (int sweep = 0; sweep < sweeps; ++sweep) dqt::half_gemv_rows(x, w, o.cols, out, first, last, isa);
    }
    return std::chrono::duration<double>(Clock::now() - start).count() / sweeps;
}

}  // namespace

int run(const Options& o) {
    omp_set_num_threads(o.threads);
    const size_t count = static_cast<size_t>(o.rows) * o.cols;
    std::vector<dqt::Float16> weights(count);
    std::vector<float> x(static_cast<size_t>(o.cols)), out(static_cast<size_t>(o.rows)),
        expected(static_cast<size_t>(o.rows));
    std::mt19937 rng(20261206);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (float& v : x) v = normal(rng);
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < count; ++i) weights[i] = static_cast<dqt::Float16>(0.02f * static_cast<float>(i % 97) - 0.96f);

    const uint64_t cache = dqt::last_level_cache_bytes();
    dqt::ReadBandwidth limit(cache);  // its passes run on the product's threads
    limit.measure_pass();
    const double bytes = static_cast<double>(count) * sizeof(dqt::Float16);
    std::printf("fp16 product: %d rows x %d columns (%.1f MB), %d thread(s); last-level cache %.1f MiB\n", o.rows, o.cols,
                bytes / 1e6, o.threads, static_cast<double>(cache) / (1 << 20));

    const int checked_rows = std::min(o.rows, 64);
    dqt::half_gemv_rows_reference(x.data(), weights.data(), o.cols, expected.data(), 0, checked_rows);
    for (const dqt::HalfIsa isa : {dqt::HalfIsa::reference, dqt::HalfIsa::avx2, dqt::HalfIsa::avx512}) {
        if (!dqt::half_isa_supported(isa)) continue;
        dqt::half_gemv_rows(x.data(), weights.data(), o.cols, out.data(), 0, checked_rows, isa);
        if (!std::equal(out.begin(), out.begin() + checked_rows, expected.begin())) {
            std::fprintf(stderr, "bench_half_gemv: the %s path differs from the reference\n", dqt::half_isa_name(isa));
            return 1;
        }
        double best = 1e30;
        const int passes = isa == dqt::HalfIsa::reference ? 1 : o.passes;  // the reference is slow
        for (int p = 0; p < passes; ++p) {
            best = std::min(best, timed_pass(o, x.data(), weights.data(), out.data(), isa));
            limit.measure_pass();
        }
        const double rate = bytes / best;
        std::printf("  %-9s %8.2f ms a pass   %6.2f GB/s   %5.1f%% of the read limit (%.2f GB/s, measured between passes)\n",
                    dqt::half_isa_name(isa), best * 1e3, rate / 1e9, 100.0 * rate / limit.bytes_per_second(),
                    limit.bytes_per_second() / 1e9);
    }
    return 0;
}

int main(int argc, char** argv) {
    const Options o = parse(argc, argv);
    try {
        return run(o);
    } catch (const std::bad_alloc&) {
        std::fprintf(stderr, "bench_half_gemv: %d x %d fp16 weights do not fit in memory: lower --rows or --cols\n",
                     o.rows, o.cols);
        return 1;
    }
}
