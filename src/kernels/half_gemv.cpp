#include "kernels/half_gemv.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstddef>

#include "kernels/float16_widen.h"

namespace dqt {

namespace {

constexpr int kLanes = 16;
constexpr int kRowsAtOnce = 4;  // 4 rows x 2 lane sets: 8 independent FMA chains

// GCC 12's convert and extract intrinsics trip its own uninitialised-value warnings (an
// undefined merge source inside the intrinsic).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

__attribute__((target("avx512f"))) inline __m512 load_half_lanes(const Float16* p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}

// Eight lanes, each already the sum (l, l+8) of a 16-lane set, summed as (l, l+4), (l, l+2),
// (l, l+1).
__attribute__((target("avx"))) inline float sum_eight_lanes(__m256 eight) {
    const __m128 four = _mm_add_ps(_mm256_castps256_ps128(eight), _mm256_extractf128_ps(eight, 1));
    const __m128 two = _mm_add_ps(four, _mm_movehl_ps(four, four));
    const __m128 one = _mm_add_ss(two, _mm_shuffle_ps(two, two, 1));
    return _mm_cvtss_f32(one);
}

// The 16 lanes summed as (l, l+8), (l, l+4), (l, l+2), (l, l+1).
__attribute__((target("avx512f"))) inline float sum_lanes(__m512 v) {
    return sum_eight_lanes(_mm256_add_ps(_mm512_castps512_ps256(v),
                                         _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1))));
}

__attribute__((target("avx512f"))) void half_gemv_rows_avx512(const float* x, const Float16* weights, int cols,
                                                              float* out, int first_row, int last_row) {
    const int blocks = cols / kLanes, whole = blocks * kLanes;
    int row = first_row;
    for (; row + kRowsAtOnce <= last_row; row += kRowsAtOnce) {
        const Float16* w[kRowsAtOnce];
        __m512 even[kRowsAtOnce], odd[kRowsAtOnce];
        for (int r = 0; r < kRowsAtOnce; ++r) {
            w[r] = weights + static_cast<size_t>(row + r) * cols;
            even[r] = _mm512_setzero_ps();
            odd[r] = _mm512_setzero_ps();
        }
        int b = 0;
        for (; b + 2 <= blocks; b += 2) {
            const __m512 x0 = _mm512_loadu_ps(x + b * kLanes), x1 = _mm512_loadu_ps(x + (b + 1) * kLanes);
            for (int r = 0; r < kRowsAtOnce; ++r) {
                even[r] = _mm512_fmadd_ps(x0, load_half_lanes(w[r] + b * kLanes), even[r]);
                odd[r] = _mm512_fmadd_ps(x1, load_half_lanes(w[r] + (b + 1) * kLanes), odd[r]);
            }
        }
        if (b < blocks) {
            const __m512 x0 = _mm512_loadu_ps(x + b * kLanes);
            for (int r = 0; r < kRowsAtOnce; ++r) even[r] = _mm512_fmadd_ps(x0, load_half_lanes(w[r] + b * kLanes), even[r]);
        }
        for (int r = 0; r < kRowsAtOnce; ++r) {
            float total = sum_lanes(_mm512_add_ps(even[r], odd[r]));
            for (int k = whole; k < cols; ++k) total = std::fma(x[k], static_cast<float>(w[r][k]), total);
            out[row + r] = total;
        }
    }
    if (row < last_row) half_gemv_rows_reference(x, weights, cols, out, row, last_row);
}

// M activation rows (x_stride apart) times one weight row: 2M FMA chains on each weight block,
// which is loaded and widened once.
template <int M>
__attribute__((target("avx512f"))) void rows_times_weight_row(const float* x, int x_stride, const Float16* w,
                                                              int cols, float* out, int out_stride) {
    const int blocks = cols / kLanes, whole = blocks * kLanes;
    __m512 even[M], odd[M];
    for (int a = 0; a < M; ++a) {
        even[a] = _mm512_setzero_ps();
        odd[a] = _mm512_setzero_ps();
    }
    int b = 0;
    for (; b + 2 <= blocks; b += 2) {
        const __m512 w0 = load_half_lanes(w + b * kLanes), w1 = load_half_lanes(w + (b + 1) * kLanes);
        for (int a = 0; a < M; ++a) {
            const float* xa = x + static_cast<size_t>(a) * x_stride;
            even[a] = _mm512_fmadd_ps(_mm512_loadu_ps(xa + b * kLanes), w0, even[a]);
            odd[a] = _mm512_fmadd_ps(_mm512_loadu_ps(xa + (b + 1) * kLanes), w1, odd[a]);
        }
    }
    if (b < blocks) {
        const __m512 w0 = load_half_lanes(w + b * kLanes);
        for (int a = 0; a < M; ++a)
            even[a] = _mm512_fmadd_ps(_mm512_loadu_ps(x + static_cast<size_t>(a) * x_stride + b * kLanes), w0, even[a]);
    }
    for (int a = 0; a < M; ++a) {
        const float* xa = x + static_cast<size_t>(a) * x_stride;
        float total = sum_lanes(_mm512_add_ps(even[a], odd[a]));
        for (int k = whole; k < cols; ++k) total = std::fma(xa[k], static_cast<float>(w[k]), total);
        out[static_cast<size_t>(a) * out_stride] = total;
    }
}

constexpr int kBatchRowsAtOnce = 8;  // 16 accumulators

__attribute__((target("avx512f"))) void half_gemm_rows_avx512(const float* x, int n, const Float16* weights, int cols,
                                                              float* out, int out_stride, int first_row, int last_row) {
    for (int row = first_row; row < last_row; ++row) {
        const Float16* w = weights + static_cast<size_t>(row) * cols;
        for (int i = 0; i < n; i += kBatchRowsAtOnce) {
            const float* xi = x + static_cast<size_t>(i) * cols;
            float* oi = out + static_cast<size_t>(i) * out_stride + row;
            switch (std::min(kBatchRowsAtOnce, n - i)) {
                case 1: rows_times_weight_row<1>(xi, cols, w, cols, oi, out_stride); break;
                case 2: rows_times_weight_row<2>(xi, cols, w, cols, oi, out_stride); break;
                case 3: rows_times_weight_row<3>(xi, cols, w, cols, oi, out_stride); break;
                case 4: rows_times_weight_row<4>(xi, cols, w, cols, oi, out_stride); break;
                case 5: rows_times_weight_row<5>(xi, cols, w, cols, oi, out_stride); break;
                case 6: rows_times_weight_row<6>(xi, cols, w, cols, oi, out_stride); break;
                case 7: rows_times_weight_row<7>(xi, cols, w, cols, oi, out_stride); break;
                default: rows_times_weight_row<8>(xi, cols, w, cols, oi, out_stride); break;
            }
        }
    }
}

// The AVX2 paths (with FMA and F16C): a 16-lane set is two registers, lanes 0-7 and 8-15, so
// every lane sees the same fused multiply-adds as in the AVX-512 paths and the reference.
#define DQT_AVX2_F16C __attribute__((target("avx2,fma,f16c")))

struct Lanes16 {
    __m256 low, high;
};

DQT_AVX2_F16C inline Lanes16 zero_lanes16() { return {_mm256_setzero_ps(), _mm256_setzero_ps()}; }
DQT_AVX2_F16C inline Lanes16 load_lanes16(const float* p) { return {_mm256_loadu_ps(p), _mm256_loadu_ps(p + 8)}; }
DQT_AVX2_F16C inline Lanes16 load_half_lanes16(const Float16* p) {
    return {_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))),
            _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 8)))};
}
// a * b + c, lane by lane.
DQT_AVX2_F16C inline Lanes16 fmadd_lanes16(Lanes16 a, Lanes16 b, Lanes16 c) {
    return {_mm256_fmadd_ps(a.low, b.low, c.low), _mm256_fmadd_ps(a.high, b.high, c.high)};
}
// The two sets added lane by lane, then summed as sum_lanes does.
DQT_AVX2_F16C inline float sum_sets16(Lanes16 even, Lanes16 odd) {
    return sum_eight_lanes(_mm256_add_ps(_mm256_add_ps(even.low, odd.low), _mm256_add_ps(even.high, odd.high)));
}

// Each weight row's stream is prefetched into L2 this far ahead. One row at a time with it, the
// 2B4T head's product read 82-85% of a Zen 3's read limit from memory, against 73-76% without it
// and 69% two rows at a time (bench_half_gemv, docs/results.md).
constexpr int kPrefetchBytesAvx2 = 1024;

// M activation rows (x_stride apart) times one weight row, as rows_times_weight_row.
template <int M>
DQT_AVX2_F16C void rows_times_weight_row_avx2(const float* x, int x_stride, const Float16* w, int cols, float* out,
                                              int out_stride) {
    const int blocks = cols / kLanes, whole = blocks * kLanes;
    Lanes16 even[M], odd[M];
    for (int a = 0; a < M; ++a) {
        even[a] = zero_lanes16();
        odd[a] = zero_lanes16();
    }
    int b = 0;
    for (; b + 2 <= blocks; b += 2) {  // 64 bytes of the row: one cache line a step
        _mm_prefetch(reinterpret_cast<const char*>(w + b * kLanes) + kPrefetchBytesAvx2, _MM_HINT_T1);
        const Lanes16 w0 = load_half_lanes16(w + b * kLanes), w1 = load_half_lanes16(w + (b + 1) * kLanes);
        for (int a = 0; a < M; ++a) {
            const float* xa = x + static_cast<size_t>(a) * x_stride;
            even[a] = fmadd_lanes16(load_lanes16(xa + b * kLanes), w0, even[a]);
            odd[a] = fmadd_lanes16(load_lanes16(xa + (b + 1) * kLanes), w1, odd[a]);
        }
    }
    if (b < blocks) {
        const Lanes16 w0 = load_half_lanes16(w + b * kLanes);
        for (int a = 0; a < M; ++a)
            even[a] = fmadd_lanes16(load_lanes16(x + static_cast<size_t>(a) * x_stride + b * kLanes), w0, even[a]);
    }
    for (int a = 0; a < M; ++a) {
        const float* xa = x + static_cast<size_t>(a) * x_stride;
        float total = sum_sets16(even[a], odd[a]);
        for (int k = whole; k < cols; ++k) total = std::fma(xa[k], static_cast<float>(w[k]), total);
        out[static_cast<size_t>(a) * out_stride] = total;
    }
}

DQT_AVX2_F16C void half_gemv_rows_avx2(const float* x, const Float16* weights, int cols, float* out, int first_row,
                                       int last_row) {
    for (int row = first_row; row < last_row; ++row)
        rows_times_weight_row_avx2<1>(x, cols, weights + static_cast<size_t>(row) * cols, cols, out + row, 1);
}

constexpr int kBatchRowsAtOnceAvx2 = 3;  // 12 accumulator registers and the weights' four

DQT_AVX2_F16C void half_gemm_rows_avx2(const float* x, int n, const Float16* weights, int cols, float* out,
                                       int out_stride, int first_row, int last_row) {
    for (int row = first_row; row < last_row; ++row) {
        const Float16* w = weights + static_cast<size_t>(row) * cols;
        for (int i = 0; i < n; i += kBatchRowsAtOnceAvx2) {
            const float* xi = x + static_cast<size_t>(i) * cols;
            float* oi = out + static_cast<size_t>(i) * out_stride + row;
            switch (std::min(kBatchRowsAtOnceAvx2, n - i)) {
                case 1: rows_times_weight_row_avx2<1>(xi, cols, w, cols, oi, out_stride); break;
                case 2: rows_times_weight_row_avx2<2>(xi, cols, w, cols, oi, out_stride); break;
                default: rows_times_weight_row_avx2<3>(xi, cols, w, cols, oi, out_stride); break;
            }
        }
    }
}

#undef DQT_AVX2_F16C

#pragma GCC diagnostic pop

}  // namespace

const char* half_isa_name(HalfIsa isa) {
    switch (isa) {
        case HalfIsa::reference: return "reference";
        case HalfIsa::avx2: return "avx2";
        case HalfIsa::avx512: return "avx512";
    }
    return "?";
}

bool half_isa_supported(HalfIsa isa) {
    switch (isa) {
        case HalfIsa::reference: return true;
        case HalfIsa::avx2:
            return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && cpu_has_f16c();
        case HalfIsa::avx512: return __builtin_cpu_supports("avx512f");
    }
    return false;
}

HalfIsa best_half_isa() {
    static const HalfIsa best = half_isa_supported(HalfIsa::avx512) ? HalfIsa::avx512
                                : half_isa_supported(HalfIsa::avx2) ? HalfIsa::avx2
                                                                    : HalfIsa::reference;
    return best;
}

void half_gemv_rows_reference(const float* x, const Float16* weights, int cols, float* out, int first_row,
                              int last_row) {
    const int blocks = cols / kLanes, whole = blocks * kLanes;
    for (int row = first_row; row < last_row; ++row) {
        const Float16* w = weights + static_cast<size_t>(row) * cols;
        float sets[2][kLanes] = {};
        for (int b = 0; b < blocks; ++b)
            for (int l = 0; l < kLanes; ++l)
                sets[b % 2][l] = std::fma(x[b * kLanes + l], static_cast<float>(w[b * kLanes + l]), sets[b % 2][l]);
        float lanes[kLanes];
        for (int l = 0; l < kLanes; ++l) lanes[l] = sets[0][l] + sets[1][l];
        for (int half = kLanes / 2; half >= 1; half /= 2)
            for (int l = 0; l < half; ++l) lanes[l] += lanes[l + half];
        float total = lanes[0];
        for (int k = whole; k < cols; ++k) total = std::fma(x[k], static_cast<float>(w[k]), total);
        out[row] = total;
    }
}

void half_gemm_rows(const float* x, int n, const Float16* weights, int cols, float* out, int out_stride, int first_row,
                    int last_row, HalfIsa isa) {
    switch (isa) {
        case HalfIsa::avx512: half_gemm_rows_avx512(x, n, weights, cols, out, out_stride, first_row, last_row); return;
        case HalfIsa::avx2: half_gemm_rows_avx2(x, n, weights, cols, out, out_stride, first_row, last_row); return;
        case HalfIsa::reference: break;
    }
    for (int i = 0; i < n; ++i)
        half_gemv_rows_reference(x + static_cast<size_t>(i) * cols, weights, cols, out + static_cast<size_t>(i) * out_stride,
                                 first_row, last_row);
}

void half_gemv_rows(const float* x, const Float16* weights, int cols, float* out, int first_row, int last_row,
                    HalfIsa isa) {
    switch (isa) {
        case HalfIsa::avx512: half_gemv_rows_avx512(x, weights, cols, out, first_row, last_row); return;
        case HalfIsa::avx2: half_gemv_rows_avx2(x, weights, cols, out, first_row, last_row); return;
        case HalfIsa::reference: half_gemv_rows_reference(x, weights, cols, out, first_row, last_row); return;
    }
}

}  // namespace dqt
