#pragma once
// The sum of an AVX2 register's eight int32 lanes (256 -> 128 -> 64 -> 32 bits), of one
// register or of eight at once, shared by the tile kernels' epilogues.
#include <immintrin.h>

#include <cstdint>

namespace dqt {

__attribute__((target("avx2"), always_inline)) inline int32_t sum_lanes_avx2(__m256i lanes) {
    const __m128i four = _mm_add_epi32(_mm256_castsi256_si128(lanes), _mm256_extracti128_si256(lanes, 1));
    const __m128i two = _mm_add_epi32(four, _mm_shuffle_epi32(four, _MM_SHUFFLE(1, 0, 3, 2)));
    const __m128i one = _mm_add_epi32(two, _mm_shuffle_epi32(two, _MM_SHUFFLE(2, 3, 0, 1)));
    return _mm_cvtsi128_si32(one);
}

// Eight registers' lane sums at once: lane i of the result is sum_lanes_avx2(lanes[i]). Pairs
// of neighbouring lanes are added three times over (hadd), which leaves each register's two
// 128-bit halves' sums apart; the last add joins them.
__attribute__((target("avx2"), always_inline)) inline __m256i sum_lanes_avx2_x8(const __m256i lanes[8]) {
    const __m256i rows0123 =
        _mm256_hadd_epi32(_mm256_hadd_epi32(lanes[0], lanes[1]), _mm256_hadd_epi32(lanes[2], lanes[3]));
    const __m256i rows4567 =
        _mm256_hadd_epi32(_mm256_hadd_epi32(lanes[4], lanes[5]), _mm256_hadd_epi32(lanes[6], lanes[7]));
    return _mm256_add_epi32(_mm256_permute2x128_si256(rows0123, rows4567, 0x20),
                            _mm256_permute2x128_si256(rows0123, rows4567, 0x31));
}

}  // namespace dqt
