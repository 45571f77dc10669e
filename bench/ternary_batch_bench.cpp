// The ternary product at decode and small-batch shapes (1 to 16 activation rows), one thread,
// beside its two limits measured in the same process: how many multiply-add instructions this
// core retires a second when nothing else holds them back (AVX-512 VNNI vpdpbusd, 64 int8
// multiply-adds each; on a CPU without it, AVX2 vpmaddubsw, 32), and how many bytes a second it
// reads beyond the cache. The weights are the linear layers of dqt's 154M bench model
// (dim 1024, 12 layers, FFN 2816; with --2b, of BitNet b1.58 2B4T's shape: dim 2560, 5 kv heads
// of 128, FFN 6912), replicated until they span at least 4x the last-level cache,
// so every row count reads its weights from memory, as a served model larger than the cache does.
//
//   build/bench_ternary_batch            rows 1, 2, 4, 8, 12, 16, on the best path of this CPU
//   build/bench_ternary_batch 1 3 8      the given row counts
//   build/bench_ternary_batch --2b 4 8   the 2B shape's layers (rows of 2560 and 6912 weights)
//   build/bench_ternary_batch --avx2     the AVX2 path (and its limit) on a CPU with AVX-512 too
//   build/bench_ternary_batch --vnni     the AVX-512 VNNI path on a CPU with AMX too
// On a CPU with AMX the best path runs kAmxMinRows to 16 rows on the tiles; its limit line
// is still the vpdpbusd one, which the tiles pass (the read limit is theirs).
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "core/cpu_cache.h"
#include "kernels/integer_isa.h"
#include "kernels/read_bandwidth.h"
#include "kernels/ternary_matmul.h"
#include "kernels/vnni.h"

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

// Instructions a second on one core with independent accumulators (more than latency times
// throughput) and register operands: the limit a product kernel could reach if loads, code
// unpacking and sums cost nothing.
constexpr long kIterations = 20'000'000;
constexpr int kVnniChains = 16;   // of AVX-512's 32 vector registers
constexpr int kMaddubsChains = 8;  // and the operand: 9 of AVX2's 16, so none spills (12 did)
// The best of 5 timings of chains(), which retires `instructions` instructions.
template <typename Chains>
double best_rate(Chains chains, double instructions) {
    double best = 0;
    for (int repeat = 0; repeat < 5; ++repeat) {
        const auto start = Clock::now();
        chains();
        best = std::max(best, instructions / seconds_since(start));
    }
    return best;
}

// Operands from memory the compiler cannot see through, so the loops are not folded away.
volatile int8_t unsigned_byte = 1, signed_byte = -1;
volatile int sink = 0;

// vpdpbusd: 64 multiply-adds each. The accumulators live in the timed function, in registers.
__attribute__((target("avx512f,avx512bw,avx512vnni"))) void vnni_chains() {
    __m512i acc[kVnniChains];
    for (int k = 0; k < kVnniChains; ++k) acc[k] = _mm512_set1_epi32(k);
    const __m512i u = _mm512_set1_epi8(unsigned_byte), s = _mm512_set1_epi8(signed_byte);
    for (long it = 0; it < kIterations; ++it) {
#pragma GCC unroll 16
        for (int k = 0; k < kVnniChains; ++k) acc[k] = dqt::dpbusd(acc[k], u, s);
    }
    for (int k = 0; k < kVnniChains; ++k) sink = sink + _mm512_cvtsi512_si32(acc[k]);  // the accumulators are used
}

// vpmaddubsw: 32 multiply-adds each (pairs summed into int16 lanes); each chain feeds its result
// back as the unsigned operand.
__attribute__((target("avx2"))) void maddubs_chains() {
    __m256i acc[kMaddubsChains];
    for (int k = 0; k < kMaddubsChains; ++k) acc[k] = _mm256_set1_epi8(unsigned_byte);
    const __m256i s = _mm256_set1_epi8(signed_byte);
    for (long it = 0; it < kIterations; ++it) {
#pragma GCC unroll 16
        for (int k = 0; k < kMaddubsChains; ++k) acc[k] = _mm256_maddubs_epi16(acc[k], s);
    }
    for (int k = 0; k < kMaddubsChains; ++k) sink = sink + _mm256_extract_epi32(acc[k], 0);  // the accumulators are used
}

struct Layer {
    int rows, cols;
};

}  // namespace

int main(int argc, char** argv) {
    std::vector<int> row_counts = {1, 2, 4, 8, 12, 16}, asked;
    bool shape_2b = false;
    dqt::IntegerIsa isa = dqt::best_integer_isa();
    for (int i = 1; i < argc; ++i) {
        if (std::strcmp(argv[i], "--2b") == 0) {
            shape_2b = true;
            continue;
        }
        if (std::strcmp(argv[i], "--avx2") == 0) {
            isa = dqt::IntegerIsa::avx2;
            continue;
        }
        if (std::strcmp(argv[i], "--vnni") == 0) {
            isa = dqt::IntegerIsa::avx512_vnni;
            continue;
        }
        const int rows = std::atoi(argv[i]);
        if (rows < 1 || rows > 64) {
            std::fprintf(stderr, "bench_ternary_batch: a row count is 1 to 64, not '%s'\n", argv[i]);
            return 1;
        }
        asked.push_back(rows);
    }
    if (!asked.empty()) row_counts = asked;
    if (isa == dqt::IntegerIsa::scalar || !dqt::integer_isa_supported(isa)) {
        // best_integer_isa() is scalar only on a CPU without AVX2, the least path this times.
        std::fprintf(stderr, "bench_ternary_batch: this CPU lacks the %s path\n",
                     dqt::integer_isa_name(isa == dqt::IntegerIsa::scalar ? dqt::IntegerIsa::avx2 : isa));
        return 1;
    }
    const bool vnni = dqt::runs_avx512_vnni(isa);
    const int macs_per_instruction = vnni ? 64 : 32;
    const char* instruction = vnni ? "vpdpbusd" : "vpmaddubsw";
    // One block's linears as (rows, cols): q, k, v, o, gate, up, down.
    const int dim = shape_2b ? 2560 : 1024, kv_dim = shape_2b ? 640 : 1024, ffn = shape_2b ? 6912 : 2816;
    const std::vector<Layer> block = {{dim, dim}, {kv_dim, dim}, {kv_dim, dim}, {dim, dim},
                                      {ffn, dim}, {ffn, dim}, {dim, ffn}};
    uint64_t block_bytes = 0;
    for (const Layer& l : block) block_bytes += static_cast<uint64_t>(l.rows) * dqt::ternary_padded_cols(l.cols) / 4;
    const uint64_t cache = dqt::last_level_cache_bytes();
    const int copies = static_cast<int>(std::max<uint64_t>(12, (4 * cache + block_bytes - 1) / block_bytes));
    std::mt19937 rng(1);
    std::uniform_int_distribution<int> code(-1, 1);
    std::vector<dqt::TernaryMatrix> weights;
    uint64_t weight_bytes = 0, macs_per_row = 0;
    for (int c = 0; c < copies; ++c) {
        for (const Layer& l : block) {
            std::vector<int8_t> q(static_cast<size_t>(l.rows) * l.cols);
            for (int8_t& v : q) v = static_cast<int8_t>(code(rng));
            weights.push_back(dqt::pack_ternary(q.data(), l.rows, l.cols, 0.01f));
            weight_bytes += weights.back().packed.size();
            macs_per_row += static_cast<uint64_t>(l.rows) * weights.back().padded_cols;
        }
    }
    const double peak = vnni ? best_rate(vnni_chains, double{kVnniChains} * kIterations)
                              : best_rate(maddubs_chains, double{kMaddubsChains} * kIterations);
    omp_set_num_threads(1);  // the bandwidth passes run on the kernel's one thread
    dqt::ReadBandwidth bandwidth(cache);
    for (int pass = 0; pass < 5; ++pass) bandwidth.measure_pass();
    std::printf("bench_ternary_batch: %d blocks of the %s model, %.1f MB of ternary weights (last-level cache %.1f MiB), "
                "1 thread, the %s path\n",
                copies, shape_2b ? "2B" : "154M", weight_bytes / 1e6, cache / 1048576.0, dqt::integer_isa_name(isa));
    std::printf("%s limit (registers only, same process): %.2f G/s = %.1f G int8 MAC/s\n", instruction, peak / 1e9,
                macs_per_instruction * peak / 1e9);
    std::printf("%5s %10s %10s %15s %13s %15s\n", "rows", "pass ms", "G MAC/s", "of MAC limit", "weight GB/s",
                "of read limit");
    std::uniform_real_distribution<float> value(-1.0f, 1.0f);
    for (const int rows : row_counts) {
        std::vector<dqt::Int8Rows> inputs(2);
        for (int which = 0; which < 2; ++which) {
            const int cols = which == 0 ? dim : ffn;
            std::vector<float> x(static_cast<size_t>(rows) * cols);
            for (float& v : x) v = value(rng);
            dqt::quantize_rows_int8(x.data(), rows, cols, inputs[static_cast<size_t>(which)]);
        }
        std::vector<float> out(static_cast<size_t>(rows) * ffn);
        double best = 1e30;
        for (int repeat = 0; repeat < 5; ++repeat) {
            bandwidth.measure_pass();  // between the passes, so both limits see the machine's same moments
            const auto start = Clock::now();
            for (const dqt::TernaryMatrix& w : weights) {
                const dqt::Int8Rows& x = inputs[w.cols == dim ? 0 : 1];
                dqt::ternary_matmul_rows(w, x, out.data(), 0, w.rows, isa);
            }
            best = std::min(best, seconds_since(start));
        }
        const double macs = static_cast<double>(macs_per_row) * rows;
        std::printf("%5d %10.2f %10.1f %14.0f%% %13.1f %14.0f%%\n", rows, best * 1e3, macs / best / 1e9,
                    100.0 * macs / macs_per_instruction / best / peak, weight_bytes / best / 1e9,
                    100.0 * weight_bytes / best / bandwidth.bytes_per_second());
    }
    std::printf("read limit (1 thread, best pass over %.0f MiB, 5 before and one between the timed passes): %.1f GB/s\n",
                bandwidth.buffer_bytes() / 1048576.0, bandwidth.bytes_per_second() / 1e9);
    return 0;
}
