#pragma once
// Adam's two moments for every parameter tensor, stored as --optim-state asks:
//   32: fp32;  16: bf16 (round to nearest even);
//   8:  block-wise 8-bit (quant/dynamic8.h), blocks of kStateBlock values, one fp32 absmax per
//       block and moment: m with the signed dynamic map, and sqrt(v), not v, with the unsigned
//       one. v spans the square of m's dynamic range; quantized directly, its small entries
//       flush to zero while m's do not, and m / (sqrt(v) + eps) explodes (measured on real
//       moments: docs/results.md). Tensors under kSmallTensor values (norm gains) keep fp32
//       state: a negligible share of the memory.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/memory.h"
#include "model/parameters.h"

namespace dqt {

enum class StateDtype { fp32, bf16, q8 };
StateDtype parse_state_dtype(const std::string& bits);  // "32", "16" or "8"
const char* state_dtype_bits(StateDtype dtype);          // "32", "16" or "8"

inline constexpr size_t kStateBlock = 256;     // values per 8-bit block (docs/results.md: why)
inline constexpr size_t kSmallTensor = 4096;   // below this, 8-bit requests keep fp32 state

// The moments of elements [first, first + count) of one tensor (all of it unless the state is
// sharded over data-parallel ranks; first is then a multiple of kStateBlock).
struct TensorMoments {
    StateDtype dtype = StateDtype::fp32;
    size_t first = 0;
    size_t count = 0;
    Buffer m, v;                  // (count) fp32, bf16 or 8-bit codes (of m and sqrt(v)); category optimizer
    Array<float> m_absmax, v_absmax;  // (blocks) 8-bit only; category optimizer
    // A coded tensor's sub-grid residuals (ParamTensor::residual_bits > 0): element i's
    // position between grid points, in units of 2^-residual_bits of a grid step, in
    // [-2^(bits-1), 2^(bits-1)); category optimizer.
    Array<int8_t> residual;
    // Adam's moments of a learned DQT scale's log grid step (model/method.h): two numbers per
    // tensor, the same on every rank (each rank updates every scale).
    float scale_moments[2] = {};  // {m, v}

    TensorMoments(size_t first, size_t count, StateDtype dtype, bool residual = false,
                  MemCategory category = MemCategory::optimizer);
    size_t element_bytes() const;
    size_t blocks() const { return (count + kStateBlock - 1) / kStateBlock; }
};

class OptimizerState {
public:
    // One TensorMoments per tensor of the layout, zeroed.
    OptimizerState(const ParamLayout& layout, StateDtype requested, MemCategory category = MemCategory::optimizer);
    // Sharded (ZeRO-1): tensor i keeps the moments of elements owned[i] only.
    OptimizerState(const ParamLayout& layout, StateDtype requested, const std::vector<ElementRange>& owned);
    TensorMoments& of(const ParamTensor& tensor) { return tensors_[static_cast<size_t>(tensor.tensor_id)]; }
    const TensorMoments& of(const ParamTensor& tensor) const {
        return tensors_[static_cast<size_t>(tensor.tensor_id)];
    }
    StateDtype requested() const { return requested_; }
    // "8-bit state for 30 tensors (3,270,656 values); fp32 for 9 small tensors (2,304)" and the
    // like; values counts the elements held here (one shard's when sharded).
    std::string describe(const ParamLayout& layout) const;

private:
    StateDtype requested_;
    std::vector<TensorMoments> tensors_;
};

// part's elements (and the scale moments) copied from full, which holds the whole tensor in
// the same dtype.
void copy_moments_range(const TensorMoments& full, TensorMoments& part);

}  // namespace dqt
