#pragma once
// Small building blocks shared by the kernels. Reductions keep several independent
// accumulators so g++ -O3 vectorises them without -ffast-math, and combine the lanes in a
// fixed order: a result depends only on the input, never on the thread that computes it.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>

namespace dqt {

// Compiles a hot function for x86-64-v4 (AVX-512), x86-64-v3 (AVX2 + FMA) and baseline x86-64;
// the loader picks the best the CPU supports (the build has no -march flag). Put it on
// functions without OpenMP pragmas: the bodies OpenMP outlines do not inherit it. CI's
// scripts/check_vector_loops.py fails on a loop the x86-64-v4 clone vectorises and the v3 one not.
// ThreadSanitizer builds compile the default version only: the loader runs the clones' resolvers
// before TSan's runtime starts, and an instrumented resolver crashes there.
#if defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define DQT_NO_TARGET_CLONES
#endif
#endif
#ifdef DQT_NO_TARGET_CLONES
#define DQT_TARGET_CLONES
#else
#define DQT_TARGET_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#endif

inline constexpr int kLanes = 8;

// sum_i a[i] * b[i], accumulated in double.
inline double dot_f64(const float* a, const float* b, int n) {
    double lane[kLanes] = {};
    int i = 0;
    for (; i + kLanes <= n; i += kLanes)
        for (int l = 0; l < kLanes; ++l) lane[l] += static_cast<double>(a[i + l]) * b[i + l];
    for (; i < n; ++i) lane[0] += static_cast<double>(a[i]) * b[i];
    double sum = 0;
    for (int l = 0; l < kLanes; ++l) sum += lane[l];
    return sum;
}

// sum_i x[i], accumulated in double.
inline double sum_f64(const float* x, int n) {
    double lane[kLanes] = {};
    int i = 0;
    for (; i + kLanes <= n; i += kLanes)
        for (int l = 0; l < kLanes; ++l) lane[l] += x[i + l];
    for (; i < n; ++i) lane[0] += x[i];
    double sum = 0;
    for (int l = 0; l < kLanes; ++l) sum += lane[l];
    return sum;
}

// sum_i a[i] * b[i] in float, for short sums (a few thousand terms) where float suffices.
// 32 lanes: several independent vector accumulators hide the add latency.
inline float dot_f32(const float* a, const float* b, int n) {
    constexpr int lanes = 32;
    float lane[lanes] = {};
    int i = 0;
    for (; i + lanes <= n; i += lanes)
        for (int l = 0; l < lanes; ++l) lane[l] += a[i + l] * b[i + l];
    for (; i < n; ++i) lane[0] += a[i] * b[i];
    float sum = 0;
    for (int l = 0; l < lanes; ++l) sum += lane[l];
    return sum;
}

// sum_i x[i] in float, for short sums.
inline float sum_f32(const float* x, int n) {
    constexpr int lanes = 32;
    float lane[lanes] = {};
    int i = 0;
    for (; i + lanes <= n; i += lanes)
        for (int l = 0; l < lanes; ++l) lane[l] += x[i + l];
    for (; i < n; ++i) lane[0] += x[i];
    float sum = 0;
    for (int l = 0; l < lanes; ++l) sum += lane[l];
    return sum;
}

// max_i |x[i]| (0 for n = 0).
inline float abs_max_f32(const float* x, int n) {
    float lane[kLanes] = {};
    int i = 0;
    for (; i + kLanes <= n; i += kLanes)
        for (int l = 0; l < kLanes; ++l) lane[l] = std::max(lane[l], std::fabs(x[i + l]));
    for (; i < n; ++i) lane[0] = std::max(lane[0], std::fabs(x[i]));
    float m = 0.0f;
    for (int l = 0; l < kLanes; ++l) m = std::max(m, lane[l]);
    return m;
}

// max_i x[i] for n >= 1.
inline float max_f32(const float* x, int n) {
    float lane[kLanes];
    for (int l = 0; l < kLanes; ++l) lane[l] = x[0];
    int i = 0;
    for (; i + kLanes <= n; i += kLanes)
        for (int l = 0; l < kLanes; ++l) lane[l] = x[i + l] > lane[l] ? x[i + l] : lane[l];
    for (; i < n; ++i) lane[0] = x[i] > lane[0] ? x[i] : lane[0];
    float m = lane[0];
    for (int l = 1; l < kLanes; ++l) m = lane[l] > m ? lane[l] : m;
    return m;
}

// std::max(x, 0.0f), bit for bit (-0 and NaN pass through), on the bit pattern so that loops
// calling it vectorise below AVX-512 (see exp_f32).
inline float max_zero_f32(float x) {
    const int32_t bits = std::bit_cast<int32_t>(x);
    const int32_t magnitude = bits & INT32_MAX;
    // All ones for a negative number other than -0: the values std::max replaces by 0.
    const int32_t below_zero = -static_cast<int32_t>(bits < 0 && magnitude != 0 && magnitude <= 0x7f800000);
    return std::bit_cast<float>(bits & ~below_zero);
}

// exp(x) in float from plain arithmetic, so loops calling it vectorise (glibc's expf does
// not without -ffast-math). Relative error below 2e-7 on [-86, 88]. Finite inputs outside
// that range are clamped to it (exp(-inf) gives about 4e-38 rather than 0, large inputs about
// 1.7e38 rather than inf); NaN stays NaN.
inline float exp_f32(float x) {
    // The clamp works on the bit pattern with masks, not selects: below AVX-512, g++ (with its
    // default -ftrapping-math) will not vectorise a loop with float comparisons, nor one with
    // integer selects under a && (AVX2 builds then ran this scalar).
    const int32_t bits = std::bit_cast<int32_t>(x);
    const int32_t sign = bits & INT32_MIN;
    const int32_t magnitude = bits & INT32_MAX;
    const int32_t limit = 0x42b00000 - ((bits >> 31) & 0x40000);  // 88.0f, or 86.0f for a negative x: keeps 2^n normal
    const int32_t is_nan = -static_cast<int32_t>(magnitude > 0x7f800000);  // all ones for a NaN
    x = std::bit_cast<float>((std::min(magnitude, limit) & ~is_nan) | (magnitude & is_nan) | sign);
    // x = n * ln2 + r with |r| <= ln2 / 2; adding 1.5 * 2^23 rounds to the nearest integer.
    const float shifter = 12582912.0f;
    const float shifted = x * 1.44269504088896341f + shifter;
    const float n = shifted - shifter;
    // n as an integer from the same bits (the low bits of shifted): converting a NaN n with
    // static_cast would be undefined, and clang's portable build returned a number for exp(NaN).
    const int32_t n_bits = std::bit_cast<int32_t>(shifted) - std::bit_cast<int32_t>(shifter);
    const float r = (x - n * 0.693359375f) + n * 2.12194440e-4f;  // ln2 split in two parts
    // Minimax polynomial for exp(r) on [-ln2/2, ln2/2] (Cephes expf).
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    // Multiply by 2^n by adding n to the exponent field (unsigned: for a NaN the sum wraps, and
    // the mask below drops it).
    const uint32_t scaled = std::bit_cast<uint32_t>(p) + (static_cast<uint32_t>(n_bits) << 23);
    return std::bit_cast<float>((bits & is_nan) | (static_cast<int32_t>(scaled) & ~is_nan));  // NaN in, the same NaN out
}

}  // namespace dqt
