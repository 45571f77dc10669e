#pragma once
// Sums of reals whose result does not depend on the order of the terms, so on no thread or
// rank count: each term is truncated once to a multiple of 2^-kExactSumFractionBits (an int64),
// and the terms add up exactly in a 128-bit integer. Terms are clamped to +-2^kExactSumTermBits
// (far beyond any gradient worth a step); a NaN term counts as zero.
#include <cmath>
#include <cstdint>

#include "core/host_device.h"

namespace dqt {

using ExactSum = __int128;

inline constexpr int kExactSumFractionBits = 40;
inline constexpr int kExactSumTermBits = 12;  // |term| <= 4096, so 2^10 terms fit an int64 (2^62)

// x in fixed point, truncated toward zero. Branch-free, so that loops of it vectorise.
DQT_HOST_DEVICE inline int64_t exact_term(double x) {
    constexpr double kOne = static_cast<double>(int64_t{1} << kExactSumFractionBits);
    constexpr double kLimit = static_cast<double>(int64_t{1} << kExactSumTermBits) * kOne;
    double y = x * kOne;
    y = y == y ? y : 0.0;  // NaN
    y = y < kLimit ? y : kLimit;
    y = y > -kLimit ? y : -kLimit;
    return static_cast<int64_t>(y);
}

inline double exact_sum_value(ExactSum sum) {
    return std::ldexp(static_cast<double>(sum), -kExactSumFractionBits);
}

}  // namespace dqt
