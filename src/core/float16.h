#pragma once
// Float16: an IEEE binary16 value, the element of fp16 KV caches. GCC (12) spells it
// _Float16 on x86-64; clang 14 accepts _Float16 there only with AVX512-FP16 but has __fp16,
// the same format as a storage type (arithmetic happens in float either way). Conversions
// from float round to nearest even in both.
namespace dqt {

#if defined(__clang__) && !defined(__FLT16_MAX__)
using Float16 = __fp16;
#else
using Float16 = _Float16;
#endif

static_assert(sizeof(Float16) == 2);

}  // namespace dqt
