#pragma once
// The sum of an AVX2 register's eight int32 lanes (256 -> 128 -> 64 -> 32 bits), shared by the
// tile kernels' epilogues.
#include <immintrin.h>

#include <cstdint>

namespace dqt {

__attribute__((target("avx2"), always_inline)) inline int32_t sum_lanes_avx2(__m256i lanes) {
    const __m128i four = _mm_add_epi32(_mm256_castsi256_si128(lanes), _mm256_extracti128_si256(lanes, 1));
    const __m128i two = _mm_add_epi32(four, _mm_shuffle_epi32(four, _MM_SHUFFLE(1, 0, 3, 2)));
    const __m128i one = _mm_add_epi32(two, _mm_shuffle_epi32(two, _MM_SHUFFLE(2, 3, 0, 1)));
    return _mm_cvtsi128_si32(one);
}

}  // namespace dqt
