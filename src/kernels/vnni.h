#pragma once
// acc += the u8 x s8 dot products of four bytes per int32 lane (AVX-512 VNNI vpdpbusd), as
// inline assembly. GCC 12's _mm512_dpbusd_epi32 does not tie its result to the accumulator:
// in a kernel holding many accumulators it adds a register copy per instruction and, under
// register pressure, stack spills (bench_ternary_batch's limit loop ran at half speed).
#include <immintrin.h>

namespace dqt {

__attribute__((target("avx512f,avx512bw,avx512vnni"), always_inline)) inline __m512i dpbusd(__m512i acc, __m512i u8,
                                                                                           __m512i s8) {
    __asm__("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(u8), "vm"(s8));
    return acc;
}

}  // namespace dqt
