#pragma once
// fp16 -> fp32, exactly, at vector speed (and back where that is exact): fp16 KV caches (kernels/attention.h) and fp16 weights
// (infer/inference_model.h) are read through it. GCC 12 does not vectorise Float16 conversions
// by itself, so the loops use AVX-512 or F16C where the CPU has them, chosen at run time.
#include <cstddef>

#include "core/float16.h"

namespace dqt {

// out[0, count) = in[0, count) widened (exact).
void widen_f16(const Float16* in, float* out, size_t count);

// The slow reference: one static_cast a value.
void widen_f16_reference(const Float16* in, float* out, size_t count);

// out[0, count) = in[0, count) rounded to fp16, and whether every value came back exactly (no
// rounding, no overflow, no NaN); it stops at the first 16 values that do not (out is then
// partly written).
bool narrow_f16_exactly(const float* in, Float16* out, size_t count);
bool narrow_f16_exactly_reference(const float* in, Float16* out, size_t count);

// F16C is CPUID leaf 1, ECX bit 29, read directly: clang 14's __builtin_cpu_supports lacks the name.
bool cpu_has_f16c();

}  // namespace dqt
