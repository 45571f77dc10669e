// What sets the rate at which one thread's ternary decode reads its weights from memory: the
// decode kernel's inner loop (kernels/ternary_tiles.cpp: small_batch_tiles<1> for AVX-512 VNNI,
// ternary_decode_rows_avx2 for AVX2) reduced to one stream of packed rows against one
// activation row held in L1, in its variants:
//   - codes shifted down then masked, as the kernels do, or masked in place (AVX-512: four
//     position masks, each dpbusd sum scaled back at the row's end; AVX2, where maddubs sums
//     in 16 bits: one shift by 4 and two masks, the codes at bits 2-3 summed apart, times 4),
//   - no software prefetch, or a prefetch D bytes ahead into L1 (hint T0) or into L2 (T1).
// Each variant runs over rows of --blocks blocks (10: BitNet 2B4T's width 2560) in a buffer of
// 4 times the last-level cache and at least 512 MiB (from memory), and over 64 KiB (from cache:
// what the loop's arithmetic alone allows), beside the read limit measured in the same process
// between the timed passes. Every variant's dot products are checked against a scalar sum.
//
//   build/bench_decode_stream                 the default sweep, on the CPU's widest path
//   build/bench_decode_stream --blocks 27     rows of 6912 weights (the 2B FFN's down projection)
//   build/bench_decode_stream --avx2          the AVX2 loops on a CPU that has AVX-512 too
//
// docs/results.md ("The decode stream prefetched into L2") holds its figures on a Zen 4, and
// ("On a Zen 3, without AVX-512") the AVX2 loops' on a Zen 3.
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/cpu_cache.h"
#include "core/memory.h"
#include "kernels/integer_isa.h"
#include "kernels/lane_sum.h"
#include "kernels/read_bandwidth.h"
#include "kernels/ternary_matmul.h"
#include "kernels/vnni.h"

// GCC 12's AVX-512 shift intrinsics trip its own uninitialised-value warning (an undefined
// merge source inside the intrinsic), as in kernels/ternary_tiles.cpp.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace {

using Clock = std::chrono::steady_clock;

enum class Unpack { shifted, masked };
enum class Prefetch { none, l1, l2 };

struct Variant {
    Unpack unpack;
    Prefetch prefetch;
    size_t distance;  // bytes ahead; 0 with Prefetch::none
};

std::string describe(const Variant& v) {
    std::string text = v.unpack == Unpack::shifted ? "shifted" : "masked ";
    if (v.prefetch == Prefetch::none) return text + "  no prefetch";
    return text + (v.prefetch == Prefetch::l1 ? "  T0 " : "  T1 ") + std::to_string(v.distance / 1024) + " KiB";
}

// Sum over rows of dot(row codes + 1, a), each row `blocks` packed blocks (kernels/ternary_matmul.h's
// layout) against the same activations a (blocks * 256 int8 values, 64-byte aligned), in the
// order the decode tile reads them (interleave_group_for_codes): a[256b + 64n + 32h + m] meets
// the code at bits 2n of byte m of half h of block b.
template <Unpack U, Prefetch P>
__attribute__((target("avx512f,avx512bw,avx512vnni"), noinline)) int64_t stream_rows(const uint8_t* packed,
                                                                                    size_t rows, int blocks,
                                                                                    const int8_t* a,
                                                                                    size_t distance) {
    const __m512i low2 = _mm512_set1_epi8(3);
    const __m512i position_mask[4] = {low2, _mm512_set1_epi8(0x0C), _mm512_set1_epi8(0x30),
                                      _mm512_set1_epi8(static_cast<char>(0xC0))};
    const size_t row_bytes = static_cast<size_t>(blocks) * dqt::kTernaryBlockBytes;
    int64_t total = 0;
    for (size_t r = 0; r < rows; ++r) {
        const uint8_t* row = packed + r * row_bytes;
        __m512i part[4];
#pragma GCC unroll 4
        for (int n = 0; n < 4; ++n) part[n] = _mm512_setzero_si512();
        for (int b = 0; b < blocks; ++b) {
            const uint8_t* block = row + static_cast<size_t>(b) * dqt::kTernaryBlockBytes;
            if constexpr (P == Prefetch::l1) _mm_prefetch(reinterpret_cast<const char*>(block + distance), _MM_HINT_T0);
            if constexpr (P == Prefetch::l2) _mm_prefetch(reinterpret_cast<const char*>(block + distance), _MM_HINT_T1);
            const __m512i w = _mm512_loadu_si512(block);
            const int8_t* block_a = a + static_cast<size_t>(b) * dqt::kTernaryBlock;
#pragma GCC unroll 4
            for (int n = 0; n < 4; ++n) {
                const __m512i codes = U == Unpack::shifted ? _mm512_and_si512(_mm512_srli_epi16(w, 2 * n), low2)
                                                           : _mm512_and_si512(w, position_mask[n]);
                part[n] = dqt::dpbusd(part[n], codes, _mm512_load_si512(block_a + n * 64));
            }
        }
        if constexpr (U == Unpack::masked) {
            part[1] = _mm512_srai_epi32(part[1], 2);
            part[2] = _mm512_srai_epi32(part[2], 4);
            part[3] = _mm512_srai_epi32(part[3], 6);
        }
        alignas(64) int32_t lanes[16];
        _mm512_store_si512(lanes, _mm512_add_epi32(_mm512_add_epi32(part[0], part[1]), _mm512_add_epi32(part[2], part[3])));
        for (int l = 0; l < 16; ++l) total += lanes[l];
    }
    return total;
}

// The same sum on AVX2, in the order ternary_decode_rows_avx2 reads the activations
// (interleave_group_for_codes for AVX2): a[256b + 128h + 32n + m] meets the code at bits 2n
// of byte m of half h of block b. maddubs sums pairs into 16 bits, so sums are widened to 32
// bits once per half (shifted, as the kernel does) or once per block (masked: a block's unit
// codes sum to at most 4 x 2 x 2 x 127 = 2,032 a lane, its codes kept times 4 to 8,128).
__attribute__((target("avx2"), always_inline)) inline __m256i activations(const int8_t* at) {
    return _mm256_load_si256(reinterpret_cast<const __m256i*>(at));
}

template <Unpack U, Prefetch P>
__attribute__((target("avx2"), noinline)) int64_t stream_rows_avx2(const uint8_t* packed, size_t rows, int blocks,
                                                                  const int8_t* a, size_t distance) {
    const __m256i low2 = _mm256_set1_epi8(3);
    const __m256i next2 = _mm256_set1_epi8(0x0C);
    const __m256i ones16 = _mm256_set1_epi16(1);
    const size_t row_bytes = static_cast<size_t>(blocks) * dqt::kTernaryBlockBytes;
    int64_t total = 0;
    for (size_t r = 0; r < rows; ++r) {
        const uint8_t* row = packed + r * row_bytes;
        __m256i units = _mm256_setzero_si256(), fours = _mm256_setzero_si256();  // int32 lanes
        for (int b = 0; b < blocks; ++b) {
            const uint8_t* block = row + static_cast<size_t>(b) * dqt::kTernaryBlockBytes;
            if constexpr (P == Prefetch::l1) _mm_prefetch(reinterpret_cast<const char*>(block + distance), _MM_HINT_T0);
            if constexpr (P == Prefetch::l2) _mm_prefetch(reinterpret_cast<const char*>(block + distance), _MM_HINT_T1);
            const int8_t* block_a = a + static_cast<size_t>(b) * dqt::kTernaryBlock;
            __m256i unit16 = _mm256_setzero_si256(), four16 = _mm256_setzero_si256();
#pragma GCC unroll 2
            for (int half = 0; half < 2; ++half) {
                const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(block + 32 * half));
                const int8_t* half_a = block_a + 128 * half;
                if constexpr (U == Unpack::shifted) {
                    __m256i sum16 = _mm256_maddubs_epi16(_mm256_and_si256(w, low2), activations(half_a));
#pragma GCC unroll 3
                    for (int n = 1; n < 4; ++n)
                        sum16 = _mm256_add_epi16(sum16, _mm256_maddubs_epi16(_mm256_and_si256(_mm256_srli_epi16(w, 2 * n), low2),
                                                                             activations(half_a + 32 * n)));
                    units = _mm256_add_epi32(units, _mm256_madd_epi16(sum16, ones16));
                } else {
                    const __m256i w4 = _mm256_srli_epi16(w, 4);
                    unit16 = _mm256_add_epi16(unit16, _mm256_maddubs_epi16(_mm256_and_si256(w, low2), activations(half_a)));
                    unit16 = _mm256_add_epi16(unit16,
                                              _mm256_maddubs_epi16(_mm256_and_si256(w4, low2), activations(half_a + 64)));
                    four16 = _mm256_add_epi16(four16,
                                              _mm256_maddubs_epi16(_mm256_and_si256(w, next2), activations(half_a + 32)));
                    four16 = _mm256_add_epi16(four16,
                                              _mm256_maddubs_epi16(_mm256_and_si256(w4, next2), activations(half_a + 96)));
                }
            }
            if constexpr (U == Unpack::masked) {
                units = _mm256_add_epi32(units, _mm256_madd_epi16(unit16, ones16));
                fours = _mm256_add_epi32(fours, _mm256_madd_epi16(four16, ones16));
            }
        }
        total += dqt::sum_lanes_avx2(units) + dqt::sum_lanes_avx2(_mm256_srai_epi32(fours, 2));
    }
    return total;
}

int64_t run_variant(const Variant& v, bool avx2, const uint8_t* packed, size_t rows, int blocks, const int8_t* a) {
    const auto pick = [&](auto unpack_tag) -> int64_t {
        constexpr Unpack U = decltype(unpack_tag)::value;
        switch (v.prefetch) {
            case Prefetch::none:
                return avx2 ? stream_rows_avx2<U, Prefetch::none>(packed, rows, blocks, a, 0)
                            : stream_rows<U, Prefetch::none>(packed, rows, blocks, a, 0);
            case Prefetch::l1:
                return avx2 ? stream_rows_avx2<U, Prefetch::l1>(packed, rows, blocks, a, v.distance)
                            : stream_rows<U, Prefetch::l1>(packed, rows, blocks, a, v.distance);
            default:
                return avx2 ? stream_rows_avx2<U, Prefetch::l2>(packed, rows, blocks, a, v.distance)
                            : stream_rows<U, Prefetch::l2>(packed, rows, blocks, a, v.distance);
        }
    };
    return v.unpack == Unpack::shifted ? pick(std::integral_constant<Unpack, Unpack::shifted>{})
                                       : pick(std::integral_constant<Unpack, Unpack::masked>{});
}

// The same sum, code by code, in either loop's activation order.
int64_t scalar_rows(bool avx2, const uint8_t* packed, size_t rows, int blocks, const int8_t* a) {
    int64_t total = 0;
    const size_t row_bytes = static_cast<size_t>(blocks) * dqt::kTernaryBlockBytes;
    for (size_t r = 0; r < rows; ++r)
        for (int b = 0; b < blocks; ++b)
            for (int half = 0; half < 2; ++half)
                for (int n = 0; n < 4; ++n)
                    for (int m = 0; m < 32; ++m)
                        total += ((packed[r * row_bytes + b * 64 + 32 * half + m] >> (2 * n)) & 3) *
                                 a[b * 256 + (avx2 ? 128 * half + 32 * n : 64 * n + 32 * half) + m];
    return total;
}

}  // namespace

int main(int argc, char** argv) {
    int blocks = 10;
    bool avx2 = !dqt::integer_isa_supported(dqt::IntegerIsa::avx512_vnni);
    for (int i = 1; i < argc; ++i) {
        if (std::strcmp(argv[i], "--avx2") == 0) {
            avx2 = true;
        } else if (std::strcmp(argv[i], "--blocks") == 0) {
            if (i + 1 == argc) {
                std::fprintf(stderr, "bench_decode_stream: --blocks needs a value, 1 to 1024\n");
                return 1;
            }
            char* end = nullptr;
            const long value = std::strtol(argv[++i], &end, 10);
            if (end == argv[i] || *end != '\0' || value < 1 || value > 1024) {
                std::fprintf(stderr, "bench_decode_stream: --blocks is 1 to 1024, not '%s'\n", argv[i]);
                return 1;
            }
            blocks = static_cast<int>(value);
        } else {
            std::fprintf(stderr, "bench_decode_stream: unknown argument '%s' (usage: bench_decode_stream [--blocks N] [--avx2])\n",
                         argv[i]);
            return 1;
        }
    }
    if (avx2 && !dqt::integer_isa_supported(dqt::IntegerIsa::avx2)) {
        std::fprintf(stderr, "bench_decode_stream: this CPU has neither AVX-512 VNNI nor AVX2, the paths it times\n");
        return 1;
    }
    omp_set_num_threads(1);
    const uint64_t cache = dqt::last_level_cache_bytes();
    const size_t row_bytes = static_cast<size_t>(blocks) * dqt::kTernaryBlockBytes;
    const size_t memory_rows = std::max<uint64_t>(uint64_t{512} << 20, 4 * cache) / row_bytes;
    const size_t cache_rows = std::max<size_t>(1, (size_t{64} << 10) / row_bytes);
    constexpr size_t kTail = 64 << 10;  // prefetches run up to 32 KiB past the last row
    dqt::Array<uint8_t> packed(dqt::MemCategory::weights, memory_rows * row_bytes + kTail);
    dqt::Array<int8_t> a(dqt::MemCategory::scratch, static_cast<size_t>(blocks) * dqt::kTernaryBlock);
    std::mt19937 rng(7);
    for (size_t i = 0; i < packed.size(); ++i) packed.data()[i] = static_cast<uint8_t>(rng());
    for (size_t i = 0; i < a.size(); ++i) a.data()[i] = static_cast<int8_t>(static_cast<int>(rng() % 255) - 127);

    std::vector<Variant> variants;
    for (const Unpack u : {Unpack::shifted, Unpack::masked}) {
        variants.push_back({u, Prefetch::none, 0});
        for (const Prefetch p : {Prefetch::l1, Prefetch::l2})
            for (const size_t kib : {1, 4, 8, 16, 32}) variants.push_back({u, p, kib * 1024});
    }
    const int64_t memory_expected = scalar_rows(avx2, packed.data(), memory_rows, blocks, a.data());
    const int64_t cache_expected = scalar_rows(avx2, packed.data(), cache_rows, blocks, a.data());

    dqt::ReadBandwidth bandwidth(cache);
    for (int pass = 0; pass < 5; ++pass) bandwidth.measure_pass();
    std::printf("bench_decode_stream: rows of %d blocks (%d weights), %.0f MiB from memory (last-level cache %.1f MiB), "
                "64 KiB from cache, 1 thread, %s loops\n",
                blocks, blocks * dqt::kTernaryBlock, memory_rows * row_bytes / 1048576.0, cache / 1048576.0, avx2 ? "AVX2" : "AVX-512 VNNI");
    std::printf("%-26s %16s %15s %16s\n", "loop", "memory GB/s", "of read limit", "cache GB/s");
    for (const Variant& v : variants) {
        double memory_best = 1e30, cache_best = 1e30;
        for (int repeat = 0; repeat < 3; ++repeat) {
            bandwidth.measure_pass();  // between the passes, so both see the machine's same moments
            auto start = Clock::now();
            const int64_t memory_sum = run_variant(v, avx2, packed.data(), memory_rows, blocks, a.data());
            memory_best = std::min(memory_best, std::chrono::duration<double>(Clock::now() - start).count());
            constexpr int kCacheSweeps = 2000;
            start = Clock::now();
            int64_t cache_sum = 0;
            for (int sweep = 0; sweep < kCacheSweeps; ++sweep)
                cache_sum += run_variant(v, avx2, packed.data(), cache_rows, blocks, a.data());
            cache_best = std::min(cache_best, std::chrono::duration<double>(Clock::now() - start).count() / kCacheSweeps);
            if (memory_sum != memory_expected || cache_sum != cache_expected * kCacheSweeps) {
                std::fprintf(stderr, "bench_decode_stream: %s summed wrong\n", describe(v).c_str());
                return 1;
            }
        }
        const double memory_rate = memory_rows * row_bytes / memory_best;
        std::printf("%-26s %16.1f %14.0f%% %16.1f\n", describe(v).c_str(), memory_rate / 1e9,
                    100.0 * memory_rate / bandwidth.bytes_per_second(), cache_rows * row_bytes / cache_best / 1e9);
    }
    std::printf("read limit (1 thread, best pass over %.0f MiB, 5 before and one between the timed passes): %.1f GB/s\n",
                bandwidth.buffer_bytes() / 1048576.0, bandwidth.bytes_per_second() / 1e9);
    return 0;
}
