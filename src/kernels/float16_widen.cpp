#include "kernels/float16_widen.h"

#include <cpuid.h>
#include <immintrin.h>

namespace dqt {

namespace {

// GCC 12's convert intrinsics trip its own uninitialised-value warning (an undefined merge
// source inside the intrinsic).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

__attribute__((target("avx512f"))) void widen_f16_avx512(const Float16* in, float* out, size_t count) {
    size_t i = 0;
    for (; i + 16 <= count; i += 16)
        _mm512_storeu_ps(out + i, _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + i))));
    for (; i < count; ++i) out[i] = static_cast<float>(in[i]);
}

__attribute__((target("avx,f16c"))) void widen_f16_f16c(const Float16* in, float* out, size_t count) {
    size_t i = 0;
    for (; i + 8 <= count; i += 8)
        _mm256_storeu_ps(out + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i))));
    for (; i < count; ++i) out[i] = static_cast<float>(in[i]);
}

__attribute__((target("avx512f"))) bool narrow_f16_exactly_avx512(const float* in, Float16* out, size_t count) {
    size_t i = 0;
    for (; i + 16 <= count; i += 16) {
        const __m512 values = _mm512_loadu_ps(in + i);
        const __m256i halves = _mm512_cvtps_ph(values, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        // Unordered counts as unequal: a NaN is not kept as fp16.
        if (_mm512_cmp_ps_mask(_mm512_cvtph_ps(halves), values, _CMP_NEQ_UQ) != 0) return false;
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), halves);
    }
    return narrow_f16_exactly_reference(in + i, out + i, count - i);
}

#pragma GCC diagnostic pop

}  // namespace

bool narrow_f16_exactly_reference(const float* in, Float16* out, size_t count) {
    for (size_t i = 0; i < count; ++i) {
        out[i] = static_cast<Float16>(in[i]);
        if (!(static_cast<float>(out[i]) == in[i])) return false;
    }
    return true;
}

bool narrow_f16_exactly(const float* in, Float16* out, size_t count) {
    static const bool avx512 = __builtin_cpu_supports("avx512f");
    return avx512 ? narrow_f16_exactly_avx512(in, out, count) : narrow_f16_exactly_reference(in, out, count);
}

bool cpu_has_f16c() {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    return __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & bit_F16C) != 0;
}

void widen_f16_reference(const Float16* in, float* out, size_t count) {
    for (size_t i = 0; i < count; ++i) out[i] = static_cast<float>(in[i]);
}

void widen_f16(const Float16* in, float* out, size_t count) {
    static const bool avx512 = __builtin_cpu_supports("avx512f"), f16c = cpu_has_f16c();
    if (avx512) {
        widen_f16_avx512(in, out, count);
    } else if (f16c) {
        widen_f16_f16c(in, out, count);
    } else {
        widen_f16_reference(in, out, count);
    }
}

}  // namespace dqt
