#pragma once
// The gradient of a learned DQT scale (--dqt-scale learned). A coded weight is W = q * d with
// grid step d = 1 / scale, so dL/dd = sum_i g_i q_i over the tensor (q the codes before the
// step). The sum is exact (core/exact_sum.h): pieces summed by the fused update, or shards by
// data-parallel ranks, give the same bits as one pass over the whole tensor. The update takes
// it inside its own loop (DqtStep::apply); this standalone sum is the reference it is tested
// against.
#include <cstddef>
#include <cstdint>

#include "core/exact_sum.h"
#include "quant/codes.h"

namespace dqt {

// sum over i in [first, last) of g[i - first] * q_i, q_i the tensor's code i.
ExactSum code_gradient_dot(const float* g, const uint8_t* codes, const CodeGrid& grid, size_t first, size_t last);

}  // namespace dqt
