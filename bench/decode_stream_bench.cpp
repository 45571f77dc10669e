// What sets the rate at which one thread's ternary decode reads its weights from memory: the
// decode kernel's inner loop (kernels/ternary_tiles.cpp: small_batch_tiles<1> for AVX-512 VNNI,
// row_lanes_avx2 for AVX2) reduced to one stream of packed rows against one activation row
// held in L1, in its variants:
//   - codes shifted down then masked, as the kernels do, or masked in place (AVX-512: four
//     position masks, each dpbusd sum scaled back at the row's end; AVX2, where maddubs sums
//     in 16 bits: one shift by 4 and two masks, the codes at bits 2-3 summed apart, times 4),
//   - no software prefetch, or a prefetch D bytes ahead into L1 (hint T0) or into L2 (T1).
// Each variant runs over rows of --blocks blocks (10: BitNet 2B4T's width 2560) in a buffer of
// 4 times the last-level cache and at least 512 MiB (from memory), and over 64 KiB (from cache:
// what the loop's arithmetic alone allows), beside the read limit measured in the same process
// between the timed passes. Every variant's dot products are checked against a scalar sum. On
// AVX2 it ends with the masked loop's arithmetic alone, on register operands: the loop's ceiling.
//
// On AVX-512 it then times two layouts of fewer bits beside the 2-bit one (the 2B inference
// issue's item 3: fewer bytes a token), in weights a second, from memory on --threads threads
// (each its share of the rows) and from cache on one, round robin, all with the T1 8 KiB
// prefetch: five trits a byte (1.6 bits), TQ1_0's fixed-point digits (byte = ceil(256 v / 243)
// for the base-3 value v; digit i = the carry of 3x out of 8 bits, x the byte times 3^i mod
// 256) unpacked with 16-bit multiplies; and the lookup layout (1.67 bits, kernels/ternary_lookup.h).
// Fewer bytes pay only where a loop's arithmetic outruns the 2-bit loop's memory rate.
//
//   build/bench_decode_stream                 the default sweep, on the CPU's widest path
//   build/bench_decode_stream --blocks 27     rows of 6912 weights (the 2B FFN's down projection)
//   build/bench_decode_stream --avx2          the AVX2 loops on a CPU that has AVX-512 too
//   build/bench_decode_stream --threads 2     the fewer-bits comparison's memory pass on 2 threads
//
// docs/results.md ("The decode stream prefetched into L2") holds its figures on a Zen 4,
// ("On a Zen 3, without AVX-512") the AVX2 loops' on a Zen 3, and ("Fewer bytes a token") the
// fewer-bits comparison on a Zen 5.
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "core/cpu_cache.h"
#include "core/memory.h"
#include "kernels/integer_isa.h"
#include "kernels/lane_sum.h"
#include "kernels/read_bandwidth.h"
#include "kernels/ternary_lookup.h"
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

// The same sum on AVX2, in the order ternary_small_batch_rows_avx2 reads the activations
// (interleave_group_for_codes for AVX2): a[256b + 128h + 32n + m] meets the code at bits 2n
// of byte m of half h of block b. maddubs sums pairs into 16 bits, so sums are widened to 32
// bits once per half (shifted, as the kernel's several-row groups do) or once per block (masked,
// as its lone row does, which widens once per 3 blocks: a block's unit
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

// The masked AVX2 loop's arithmetic alone: one shift, four masks, four vpmaddubsw and four adds
// a 32-byte half-block, on register operands (no loads, no prefetch), four independent sums.
// Its rate in bytes of codes a second is the most the loop could read if memory and loads cost
// nothing: where it is below the read limit, one thread's decode is bound by its arithmetic.
volatile uint8_t register_code = 0x5A;
volatile int64_t arithmetic_sink = 0;
__attribute__((target("avx2"), noinline)) double masked_arithmetic_rate_avx2() {
    constexpr long kHalves = 200'000'000;
    const __m256i low2 = _mm256_set1_epi8(3), next2 = _mm256_set1_epi8(0x0C);
    const __m256i a[4] = {_mm256_set1_epi8(1), _mm256_set1_epi8(-2), _mm256_set1_epi8(3), _mm256_set1_epi8(-4)};
    double best = 0;
    for (int repeat = 0; repeat < 5; ++repeat) {
        __m256i w = _mm256_set1_epi8(static_cast<char>(register_code));
        __m256i units_low = _mm256_setzero_si256(), units_high = units_low;  // s16, as the loop's two
        __m256i fours_low = units_low, fours_high = units_low;                 // sums, split for throughput
        const auto start = Clock::now();
        for (long half = 0; half < kHalves; ++half) {
            asm volatile("" : "+x"(w));  // a fresh code vector each half, as a load would give
            const __m256i w4 = _mm256_srli_epi16(w, 4);
            units_low = _mm256_add_epi16(units_low, _mm256_maddubs_epi16(_mm256_and_si256(w, low2), a[0]));
            units_high = _mm256_add_epi16(units_high, _mm256_maddubs_epi16(_mm256_and_si256(w4, low2), a[1]));
            fours_low = _mm256_add_epi16(fours_low, _mm256_maddubs_epi16(_mm256_and_si256(w, next2), a[2]));
            fours_high = _mm256_add_epi16(fours_high, _mm256_maddubs_epi16(_mm256_and_si256(w4, next2), a[3]));
        }
        best = std::max(best, 32.0 * kHalves / std::chrono::duration<double>(Clock::now() - start).count());
        const __m256i sums =
            _mm256_add_epi16(_mm256_add_epi16(units_low, units_high), _mm256_add_epi16(fours_low, fours_high));
        arithmetic_sink = arithmetic_sink + _mm256_extract_epi16(sums, 0);  // the sums are used
    }
    return best;
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

// ---- five trits a byte ---------------------------------------------------------------------
//
// A base-3 block is 320 weights in 64 bytes: byte m's digit i (most significant first) meets
// a[320b + 64i + m]. There is no byte multiply, so the bytes go through 16-bit lanes, one
// byte a lane: even bytes held high (mulhi by 3 puts the digit in the low byte, mullo by 3
// leaves the next x high and the low byte clear), odd bytes held low (mullo by 3 puts the
// digit in the high byte and x in the low one); the two digits merge into one code vector,
// one dpbusd a digit.
constexpr int kBase3Block = 320;  // weights a 64-byte block

int base3_digit(uint8_t byte, int i) {
    unsigned x = byte;
    for (int k = 0; k < i; ++k) x = (3 * x) & 255;
    return static_cast<int>((3 * x) >> 8);
}

uint8_t base3_byte(int value) { return static_cast<uint8_t>((value * 256 + 242) / 243); }  // value in [0, 243)

__attribute__((target("avx512f,avx512bw,avx512vnni"), noinline)) int64_t stream_rows_base3(const uint8_t* packed,
                                                                                          size_t rows, int blocks,
                                                                                          const int8_t* a) {
    const __m512i three = _mm512_set1_epi16(3);
    const __m512i low_byte = _mm512_set1_epi16(0x00FF);
    const __m512i high_byte = _mm512_set1_epi16(static_cast<short>(0xFF00));
    const size_t row_bytes = static_cast<size_t>(blocks) * 64;
    int64_t total = 0;
    for (size_t r = 0; r < rows; ++r) {
        const uint8_t* row = packed + r * row_bytes;
        __m512i acc[2] = {_mm512_setzero_si512(), _mm512_setzero_si512()};
        for (int b = 0; b < blocks; ++b) {
            _mm_prefetch(reinterpret_cast<const char*>(row + static_cast<size_t>(b) * 64 + 8192), _MM_HINT_T1);
            const __m512i w = _mm512_loadu_si512(row + static_cast<size_t>(b) * 64);
            __m512i even = _mm512_slli_epi16(w, 8);
            __m512i odd = _mm512_srli_epi16(w, 8);
            const int8_t* block_a = a + static_cast<size_t>(b) * kBase3Block;
#pragma GCC unroll 5
            for (int i = 0; i < 5; ++i) {
                const __m512i even_digits = _mm512_mulhi_epu16(even, three);
                even = _mm512_mullo_epi16(even, three);
                const __m512i odd_tripled = _mm512_mullo_epi16(odd, three);
                // even_digits | (odd_tripled & high_byte)
                const __m512i codes = _mm512_ternarylogic_epi32(even_digits, odd_tripled, high_byte, 0xF8);
                odd = _mm512_and_si512(odd_tripled, low_byte);
                acc[i & 1] = dqt::dpbusd(acc[i & 1], codes, _mm512_load_si512(block_a + i * 64));
            }
        }
        alignas(64) int32_t lanes[16];
        _mm512_store_si512(lanes, _mm512_add_epi32(acc[0], acc[1]));
        for (int l = 0; l < 16; ++l) total += lanes[l];
    }
    return total;
}

int64_t scalar_rows_base3(const uint8_t* packed, size_t rows, int blocks, const int8_t* a) {
    int64_t total = 0;
    for (size_t r = 0; r < rows; ++r)
        for (int b = 0; b < blocks; ++b)
            for (int m = 0; m < 64; ++m)
                for (int i = 0; i < 5; ++i)
                    total += base3_digit(packed[(r * blocks + b) * 64 + m], i) * a[b * kBase3Block + 64 * i + m];
    return total;
}

// Items [0, count) (rows or tiles) through `loop(first, last)` split over the OpenMP team, each
// thread its contiguous share.
template <typename Loop>
int64_t run_split(Loop loop, size_t count) {
    int64_t sum = 0;
#pragma omp parallel reduction(+ : sum)
    {
        const size_t threads = static_cast<size_t>(omp_get_num_threads()), t = static_cast<size_t>(omp_get_thread_num());
        sum += loop(count * t / threads, count * (t + 1) / threads);
    }
    return sum;
}

// One layout of the comparison: its bytes, a loop over items [first, last) from memory and
// over the cache-sized items, and the sums those must give.
struct FewerBitsLayout {
    const char* name;
    size_t memory_bytes, cache_bytes;
    size_t memory_items, cache_items;
    std::function<int64_t(size_t, size_t)> memory_loop, cache_loop;
    int64_t memory_expected, cache_expected;
};

// Two fewer-bits layouts beside the 2-bit loop (masked, T1 8 KiB) on rows of the same width:
// five trits a byte (rows padded to whole 320-weight blocks) and the lookup layout
// (kernels/ternary_lookup.h; rows in tiles of 32, its tables built inside each timed pass).
int compare_fewer_bits(const uint8_t* packed2, size_t memory_rows, size_t cache_rows, int blocks, const int8_t* a,
                       uint64_t cache, int threads) {
    const int row_weights = blocks * dqt::kTernaryBlock;
    const int blocks3 = (row_weights + kBase3Block - 1) / kBase3Block;
    const size_t row_bytes2 = static_cast<size_t>(blocks) * dqt::kTernaryBlockBytes, row_bytes3 = static_cast<size_t>(blocks3) * 64;
    constexpr size_t kTail = 64 << 10;
    std::mt19937 rng(11);

    dqt::Array<uint8_t> packed3(dqt::MemCategory::weights, memory_rows * row_bytes3 + kTail);
    dqt::Array<int8_t> a3(dqt::MemCategory::scratch, static_cast<size_t>(blocks3) * kBase3Block);
    for (size_t i = 0; i < packed3.size(); ++i) packed3.data()[i] = base3_byte(static_cast<int>(rng() % 243));
    for (size_t i = 0; i < a3.size(); ++i)
        a3.data()[i] = i < static_cast<size_t>(row_weights) ? static_cast<int8_t>(static_cast<int>(rng() % 255) - 127) : 0;
    for (int value = 0; value < 243; ++value)  // the encoding holds for every five trits
        for (int i = 0, rest = value, place = 81; i < 5; rest %= place, place /= 3, ++i)
            if (base3_digit(base3_byte(value), i) != rest / place) {
                std::fprintf(stderr, "bench_decode_stream: base-3 value %d reads back wrong at digit %d\n", value, i);
                return 1;
            }

    // The lookup layout filled directly with random valid bytes (two indices below 14 a byte,
    // random sign words): packing 2 billion codes would take longer than the timing.
    dqt::TernaryLookupMatrix lookup;
    lookup.rows = static_cast<int>(memory_rows / dqt::kLookupTileRows * dqt::kLookupTileRows);
    lookup.cols = row_weights;
    lookup.triples = (row_weights + 5) / 6 * 2;
    lookup.gamma = 1.0f;
    lookup.packed = dqt::Array<uint8_t>(dqt::MemCategory::weights, lookup.tiles() * lookup.tile_bytes() + kTail);
    for (size_t pair = 0; pair < lookup.packed.size() / dqt::kLookupPairBytes; ++pair) {
        uint8_t* bytes = lookup.packed.data() + pair * dqt::kLookupPairBytes;
        for (int lane = 0; lane < 32; ++lane) bytes[lane] = static_cast<uint8_t>(rng() % 14 | (rng() % 14) << 4);
        for (int i = 32; i < dqt::kLookupPairBytes; ++i) bytes[i] = static_cast<uint8_t>(rng());
    }
    const size_t cache_tiles = std::max<size_t>(1, (size_t{64} << 10) / lookup.tile_bytes());
    std::vector<int32_t> lookup_dots(lookup.rows);
    const auto lookup_tiles = [&](const int16_t* tables, size_t first, size_t last) {
        dqt::ternary_lookup_dots_avx512(lookup, tables, static_cast<int>(first), static_cast<int>(last), lookup_dots.data());
        int64_t sum = 0;
        for (size_t r = first * dqt::kLookupTileRows; r < last * dqt::kLookupTileRows; ++r) sum += lookup_dots[r];
        return sum;
    };
    // From memory each thread builds its tables inside the timed pass, as a decode does once a
    // matrix; from cache (3 tiles a sweep, where building them would be most of the time) they
    // are built once, and their cost is timed on its own below.
    const auto lookup_memory_loop = [&](size_t first, size_t last) {
        std::vector<int16_t> tables(dqt::ternary_lookup_table_entries(lookup));
        dqt::ternary_lookup_tables(lookup, a, tables.data());
        return lookup_tiles(tables.data(), first, last);
    };
    std::vector<int16_t> cache_tables(dqt::ternary_lookup_table_entries(lookup));
    dqt::ternary_lookup_tables(lookup, a, cache_tables.data());
    const auto lookup_cache_loop = [&](size_t first, size_t last) { return lookup_tiles(cache_tables.data(), first, last); };
    // The lookup's expected sums from the reference: every row of the cache-sized tiles, and
    // in the memory pass every row of one tile in 1,000 (the whole reference would take minutes).
    const auto reference_sum = [&](size_t first_tile, size_t last_tile) {
        int64_t sum = 0;
        for (size_t r = first_tile * dqt::kLookupTileRows; r < last_tile * dqt::kLookupTileRows; ++r)
            for (int c = 0; c < lookup.cols; ++c)
                sum += static_cast<int64_t>(dqt::ternary_lookup_code_at(lookup, static_cast<int>(r), c)) * a[c];
        return sum;
    };

    const auto two_bit_loop = [&](size_t first, size_t last) {
        return stream_rows<Unpack::masked, Prefetch::l2>(packed2 + first * row_bytes2, last - first, blocks, a, 8192);
    };
    const auto base3_loop = [&](size_t first, size_t last) {
        return stream_rows_base3(packed3.data() + first * row_bytes3, last - first, blocks3, a3.data());
    };
    // Tiles 0, 1000, 2000, ...: the memory pass's sample, summed by the reference once.
    std::vector<int64_t> sampled_lookup_sums;
    for (size_t t = 0; t < static_cast<size_t>(lookup.tiles()); t += 1000) sampled_lookup_sums.push_back(reference_sum(t, t + 1));

    const std::vector<FewerBitsLayout> layouts = {
        {"2 bits (TQ2_0 codes)", memory_rows * row_bytes2, cache_rows * row_bytes2, memory_rows, cache_rows,
         two_bit_loop, two_bit_loop, scalar_rows(false, packed2, memory_rows, blocks, a),
         scalar_rows(false, packed2, cache_rows, blocks, a)},
        {"1.6 bits (base 3)", memory_rows * row_bytes3, cache_rows * row_bytes3, memory_rows, cache_rows, base3_loop,
         base3_loop, scalar_rows_base3(packed3.data(), memory_rows, blocks3, a3.data()),
         scalar_rows_base3(packed3.data(), cache_rows, blocks3, a3.data())},
        {"1.67 bits (lookup)", lookup.tiles() * lookup.tile_bytes(), cache_tiles * lookup.tile_bytes(),
         static_cast<size_t>(lookup.tiles()), cache_tiles, lookup_memory_loop, lookup_cache_loop, 0,
         reference_sum(0, cache_tiles)},
    };

    omp_set_num_threads(threads);
    dqt::ReadBandwidth bandwidth(cache);
    for (int pass = 0; pass < 5; ++pass) bandwidth.measure_pass();
    std::printf("\n2 bits against fewer (rows of %d weights, the base-3 ones padded to %d), T1 8 KiB prefetch, "
                "memory on %d thread(s), cache on 1\n",
                row_weights, blocks3 * kBase3Block, threads);
    std::printf("%-24s %14s %13s %15s %18s\n", "layout", "memory Gw/s", "memory GB/s", "of read limit", "cache Gw/s (1 t)");
    // Round robin, best of 5 each: every layout sees the machine's same moments (this VM's
    // bandwidth moves by a third within minutes).
    std::vector<double> memory_best(layouts.size(), 1e30), cache_best(layouts.size(), 1e30);
    for (int repeat = 0; repeat < 5; ++repeat) {
        for (size_t l = 0; l < layouts.size(); ++l) {
            const FewerBitsLayout& layout = layouts[l];
            omp_set_num_threads(threads);
            bandwidth.measure_pass();
            auto start = Clock::now();
            const int64_t memory_sum = run_split(layout.memory_loop, layout.memory_items);
            memory_best[l] = std::min(memory_best[l], std::chrono::duration<double>(Clock::now() - start).count());
            omp_set_num_threads(1);
            constexpr int kCacheSweeps = 2000;
            int64_t cache_sum = 0;
            start = Clock::now();
            for (int sweep = 0; sweep < kCacheSweeps; ++sweep) cache_sum += layout.cache_loop(0, layout.cache_items);
            cache_best[l] = std::min(cache_best[l], std::chrono::duration<double>(Clock::now() - start).count() / kCacheSweeps);
            bool right = cache_sum == layout.cache_expected * kCacheSweeps;
            if (&layout == &layouts.back()) {  // the memory pass left every row's dot in lookup_dots: a sample checked
                for (size_t k = 0; k < sampled_lookup_sums.size(); ++k) {
                    int64_t dots = 0;
                    for (size_t r = k * 1000 * dqt::kLookupTileRows; r < (k * 1000 + 1) * dqt::kLookupTileRows; ++r)
                        dots += lookup_dots[r];
                    right = right && dots == sampled_lookup_sums[k];
                }
            } else {
                right = right && memory_sum == layout.memory_expected;
            }
            if (!right) {
                std::fprintf(stderr, "bench_decode_stream: the %s loop summed wrong\n", layout.name);
                return 1;
            }
        }
    }
    for (size_t l = 0; l < layouts.size(); ++l) {
        const FewerBitsLayout& layout = layouts[l];
        const size_t rows_an_item = &layout == &layouts.back() ? dqt::kLookupTileRows : 1;
        const double weights = static_cast<double>(layout.memory_items * rows_an_item) * row_weights;
        const double cache_weights = static_cast<double>(layout.cache_items * rows_an_item) * row_weights;
        const double memory_rate = layout.memory_bytes / memory_best[l];
        std::printf("%-24s %14.1f %13.1f %14.0f%% %18.1f\n", layout.name, weights / memory_best[l] / 1e9, memory_rate / 1e9,
                    100.0 * memory_rate / bandwidth.bytes_per_second(), cache_weights / cache_best[l] / 1e9);
    }
    std::printf("read limit (%d thread(s), best pass over %.0f MiB): %.1f GB/s\n", threads,
                bandwidth.buffer_bytes() / 1048576.0, bandwidth.bytes_per_second() / 1e9);
    double tables_best = 1e30;
    for (int repeat = 0; repeat < 5; ++repeat) {
        constexpr int kBuilds = 1000;
        const auto start = Clock::now();
        for (int build = 0; build < kBuilds; ++build) {
            dqt::ternary_lookup_tables(lookup, a, cache_tables.data());
            asm volatile("" ::: "memory");  // each build is kept
        }
        tables_best = std::min(tables_best, std::chrono::duration<double>(Clock::now() - start).count() / kBuilds);
    }
    std::printf("lookup tables of one activation row (%d triples): %.2f us\n", lookup.triples, tables_best * 1e6);
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    int blocks = 10;
    int threads = 1;
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
        } else if (std::strcmp(argv[i], "--threads") == 0) {
            char* end = nullptr;
            const long value = i + 1 < argc ? std::strtol(argv[i + 1], &end, 10) : 0;
            if (i + 1 == argc || end == argv[i + 1] || *end != '\0' || value < 1 || value > 256) {
                std::fprintf(stderr, "bench_decode_stream: --threads is 1 to 256\n");
                return 1;
            }
            threads = static_cast<int>(value);
            ++i;
        } else {
            std::fprintf(stderr, "bench_decode_stream: unknown argument '%s' (usage: bench_decode_stream [--blocks N] [--avx2] [--threads N])\n",
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
    if (avx2) {
        const double arithmetic = masked_arithmetic_rate_avx2();
        std::printf("masked loop's arithmetic alone (register operands, no loads): %.1f GB/s of codes, %.0f%% of the read limit\n",
                    arithmetic / 1e9, 100.0 * arithmetic / bandwidth.bytes_per_second());
        return 0;
    }
    return compare_fewer_bits(packed.data(), memory_rows, cache_rows, blocks, a.data(), cache, threads);
}
