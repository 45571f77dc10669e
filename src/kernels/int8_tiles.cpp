// Tile kernels of int8_matmul; see kernels/int8_tiles.h. Each instruction-set path is
// compiled with a target attribute, so the binary needs no -march flag and picks at run time.
#include "kernels/int8_tiles.h"

#include <immintrin.h>

#include <array>
#include <utility>

#include "kernels/lane_sum.h"

// Unrolls a loop over a tile's rows early enough that GCC 12 then keeps the accumulator
// arrays in registers. Left to its later unrolling, the arrays stay in memory: zeroed with
// rep stos on every call, and each dpbusd gets a register copy in and out (about 10% slower,
// decode and prompt alike).
#define DQT_TILE_UNROLL _Pragma("GCC unroll 16")

namespace dqt {

namespace {

// ---- portable scalar path ----------------------------------------------------------------

void tile_scalar(const int8_t* const* w_rows, int w_count, const int8_t* const* a_rows, int a_count, int cols,
                 int32_t* dots) {
    for (int i = 0; i < w_count; ++i) {
        for (int j = 0; j < a_count; ++j) {
            int32_t sum = 0;
            for (int c = 0; c < cols; ++c) sum += static_cast<int32_t>(w_rows[i][c]) * a_rows[j][c];
            dots[i * kInt8DotsStride + j] = sum;
        }
    }
}

// ---- AVX2 ----------------------------------------------------------------------------------
//
// maddubs (u8 x s8 -> s16 pairs, saturating) needs an unsigned operand. The sign trick moves
// q's sign onto a: |q| as u8 (|-128| = 0x80 reads as 128) times a * sign(q) as s8. That is
// exact unless a = -128: -a has no int8, and 2 * 128 * 128 = 32768 would saturate a pair.
// With a in [-127, 127] a pair is at most 2 * 128 * 127 = 32512, so each maddubs is exact,
// and madd by ones widens it to int32 before anything accumulates.
//
// The quantizer never produces -128 (|x * s| <= 127), but the type allows it, so the fast
// pass keeps min(a) (one instruction per activation vector, shared by all weight rows), and
// a tile that saw -128 is recomputed by the widened form below: both operands sign-extended
// to int16, then madd (pairs at most 2 * 128 * 128, exact in int32 for any int8). Measured
// on Zen 5, the widened form alone is about 10% slower for prompts (the same for decode): its
// sign extensions cost more vector instructions than the sign trick's abs and sign.

template <int WR, int AR>
__attribute__((target("avx2"))) void reduce_avx2(const __m256i (&acc)[WR][AR], int32_t* dots) {
    DQT_TILE_UNROLL
    for (int i = 0; i < WR; ++i) {
        DQT_TILE_UNROLL
        for (int j = 0; j < AR; ++j) {
            dots[i * kInt8DotsStride + j] = sum_lanes_avx2(acc[i][j]);
        }
    }
}

// Exact for any int8.
template <int WR, int AR>
__attribute__((target("avx2"))) void tile_avx2_widened(const int8_t* const* w_rows, const int8_t* const* a_rows,
                                                       int cols, int32_t* dots) {
    __m256i acc[WR][AR];
    DQT_TILE_UNROLL
    for (int i = 0; i < WR; ++i)
        DQT_TILE_UNROLL
        for (int j = 0; j < AR; ++j) acc[i][j] = _mm256_setzero_si256();
    for (int c = 0; c < cols; c += 16) {
        __m256i a[AR];  // (16) int16
        DQT_TILE_UNROLL
        for (int j = 0; j < AR; ++j)
            a[j] = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a_rows[j] + c)));
        DQT_TILE_UNROLL
        for (int i = 0; i < WR; ++i) {
            const __m256i w = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w_rows[i] + c)));
            DQT_TILE_UNROLL
            for (int j = 0; j < AR; ++j) acc[i][j] = _mm256_add_epi32(acc[i][j], _mm256_madd_epi16(w, a[j]));
        }
    }
    reduce_avx2<WR, AR>(acc, dots);
}

// Exact unless some a = -128; returns false (dots unwritten) when it saw one.
template <int WR, int AR>
__attribute__((target("avx2"))) bool tile_avx2_sign_trick(const int8_t* const* w_rows, const int8_t* const* a_rows,
                                                           int cols, int32_t* dots) {
    const __m256i ones16 = _mm256_set1_epi16(1);
    __m256i a_min = _mm256_set1_epi8(127);
    __m256i acc[WR][AR];
    DQT_TILE_UNROLL
    for (int i = 0; i < WR; ++i)
        DQT_TILE_UNROLL
        for (int j = 0; j < AR; ++j) acc[i][j] = _mm256_setzero_si256();
    for (int c = 0; c < cols; c += 32) {
        __m256i a[AR];  // (32) int8
        DQT_TILE_UNROLL
        for (int j = 0; j < AR; ++j) {
            a[j] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a_rows[j] + c));
            a_min = _mm256_min_epi8(a_min, a[j]);
        }
        DQT_TILE_UNROLL
        for (int i = 0; i < WR; ++i) {
            const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w_rows[i] + c));
            const __m256i w_abs = _mm256_abs_epi8(w);
            DQT_TILE_UNROLL
            for (int j = 0; j < AR; ++j) {
                const __m256i pairs = _mm256_maddubs_epi16(w_abs, _mm256_sign_epi8(a[j], w));
                acc[i][j] = _mm256_add_epi32(acc[i][j], _mm256_madd_epi16(pairs, ones16));
            }
        }
    }
    if (_mm256_movemask_epi8(_mm256_cmpeq_epi8(a_min, _mm256_set1_epi8(-128))) != 0) return false;
    reduce_avx2<WR, AR>(acc, dots);
    return true;
}

template <int WR, int AR>
void tile_avx2(const int8_t* const* w_rows, const int8_t* const* a_rows, int cols, int32_t* dots) {
    if (!tile_avx2_sign_trick<WR, AR>(w_rows, a_rows, cols, dots)) tile_avx2_widened<WR, AR>(w_rows, a_rows, cols, dots);
}

// ---- AVX-512 VNNI: dpbusd (u8 x s8, four products per s32 lane, no saturation) -----------
//
// The activations become unsigned by flipping their sign bit (a ^ 0x80 = a + 128 as u8), the
// weights stay signed; the caller subtracts 128 * sum(q). The flip is paid once per
// activation vector and shared by every weight row of the tile.

template <int WR, int AR>
__attribute__((target("avx512f,avx512bw,avx512vnni"))) void tile_avx512(const int8_t* const* w_rows,
                                                                        const int8_t* const* a_rows, int cols,
                                                                        int32_t* dots) {
    const __m512i sign_bit = _mm512_set1_epi8(static_cast<char>(0x80));
    __m512i acc[WR][AR];
    DQT_TILE_UNROLL
    for (int i = 0; i < WR; ++i)
        DQT_TILE_UNROLL
        for (int j = 0; j < AR; ++j) acc[i][j] = _mm512_setzero_si512();
    for (int c = 0; c < cols; c += 64) {
        __m512i a[AR];  // (64) a + 128 as u8
        DQT_TILE_UNROLL
        for (int j = 0; j < AR; ++j) a[j] = _mm512_xor_si512(_mm512_loadu_si512(a_rows[j] + c), sign_bit);
        DQT_TILE_UNROLL
        for (int i = 0; i < WR; ++i) {
            const __m512i w = _mm512_loadu_si512(w_rows[i] + c);
            DQT_TILE_UNROLL
            for (int j = 0; j < AR; ++j) acc[i][j] = _mm512_dpbusd_epi32(acc[i][j], a[j], w);
        }
    }
    // Lanes folded in registers, 16 -> 8 -> 4 -> 1. Halves through the maskz extract: GCC 12's
    // _mm512_castsi512_si256, unmasked extracts and _mm512_reduce_add_epi32 trip its own
    // uninitialised-value warnings.
    DQT_TILE_UNROLL
    for (int i = 0; i < WR; ++i) {
        DQT_TILE_UNROLL
        for (int j = 0; j < AR; ++j) {
            const __m512i v = acc[i][j];
            const __m256i eight = _mm256_add_epi32(_mm512_maskz_extracti64x4_epi64(0xF, v, 0),
                                                     _mm512_maskz_extracti64x4_epi64(0xF, v, 1));
            dots[i * kInt8DotsStride + j] = sum_lanes_avx2(eight);
        }
    }
}

// Adapters that give every instruction set the same template shape, and a table of the
// instantiations up to the kernel's largest tile, indexed by the tile's actual size (edge
// tiles are smaller).
template <int WR, int AR>
struct Avx2Tile {
    static void run(const int8_t* const* w, const int8_t* const* a, int cols, int32_t* dots) {
        tile_avx2<WR, AR>(w, a, cols, dots);
    }
};

template <int WR, int AR>
struct Avx512Tile {
    static void run(const int8_t* const* w, const int8_t* const* a, int cols, int32_t* dots) {
        tile_avx512<WR, AR>(w, a, cols, dots);
    }
};

using FixedTileFunction = void (*)(const int8_t* const* w_rows, const int8_t* const* a_rows, int cols, int32_t* dots);

template <template <int, int> class Kernel, int MaxAR, int... Index>
constexpr std::array<FixedTileFunction, sizeof...(Index)> tile_table(std::integer_sequence<int, Index...>) {
    return {&Kernel<Index / MaxAR + 1, Index % MaxAR + 1>::run...};
}

template <template <int, int> class Kernel, int MaxWR, int MaxAR>
void run_tile(const int8_t* const* w_rows, int w_count, const int8_t* const* a_rows, int a_count, int cols,
              int32_t* dots) {
    static_assert(MaxWR <= kInt8TileMaxWeightRows && MaxAR <= kInt8TileMaxActivationRows);
    static constexpr auto table = tile_table<Kernel, MaxAR>(std::make_integer_sequence<int, MaxWR * MaxAR>{});
    table[(w_count - 1) * MaxAR + (a_count - 1)](w_rows, a_rows, cols, dots);
}

template <template <int, int> class Kernel, int MaxWR, int MaxAR>
constexpr Int8TileKernel kernel_of(int activation_bias) {
    return {run_tile<Kernel, MaxWR, MaxAR>, MaxWR, MaxAR, activation_bias};
}

}  // namespace

Int8TileKernel int8_tile_kernel_scalar(int /*activation_rows*/) { return {tile_scalar, 4, 4, 0}; }

// Tile shapes measured on Zen 5 with 4096 x 4096 weights, one thread. Decode streams the
// weights: 8 rows in flight reach the memory's read bandwidth, 4 do not. Prompts are compute
// bound: the largest tile whose accumulators and operands fit the register file wins. AVX2
// has 16 registers for 4 x 2 accumulators, 2 activation vectors, q, |q|, the ones, min(a) and
// temporaries (GCC spills a few; 3 x 3, 4 x 3 and 5 x 2 measure the same); AVX-512 has 32 for
// 6 x 4 accumulators and 4 activation vectors (5 x 5 the same, 8 x 2 and 8 x 3 slower).
Int8TileKernel int8_tile_kernel_avx2(int activation_rows) {
    return activation_rows == 1 ? kernel_of<Avx2Tile, 8, 1>(0) : kernel_of<Avx2Tile, 4, 2>(0);
}

Int8TileKernel int8_tile_kernel_avx512_vnni(int activation_rows) {
    return activation_rows == 1 ? kernel_of<Avx512Tile, 8, 1>(128) : kernel_of<Avx512Tile, 6, 4>(128);
}

}  // namespace dqt
