#pragma once
// Adam's two moments for every parameter (laid out like the gradients), stored in fp32 or
// bf16 (--optim-state 32 | 16). Kernels take typed pointers (float* or uint16_t*) and read
// and write through load_moment / store_moment, so one templated loop serves both.
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/memory.h"
#include "quant/bf16.h"

namespace dqt {

enum class StateDtype { fp32, bf16 };
StateDtype parse_state_dtype(const std::string& bits);  // "32" or "16"
const char* state_dtype_bits(StateDtype dtype);          // "32" or "16"

inline float load_moment(const float* p, size_t i) { return p[i]; }
inline float load_moment(const uint16_t* p, size_t i) { return bf16_to_float(p[i]); }
inline void store_moment(float* p, size_t i, float x) { p[i] = x; }
inline void store_moment(uint16_t* p, size_t i, float x) { p[i] = float_to_bf16(x); }

class OptimizerState {
public:
    OptimizerState(size_t count, StateDtype dtype);  // zeroed, category optimizer
    StateDtype dtype() const { return dtype_; }
    size_t count() const { return count_; }
    size_t element_bytes() const { return dtype_ == StateDtype::fp32 ? 4 : 2; }
    // Raw moment storage (checkpoints); offset in elements.
    void* m_bytes(size_t offset) const { return static_cast<char*>(m_.data()) + offset * element_bytes(); }
    void* v_bytes(size_t offset) const { return static_cast<char*>(v_.data()) + offset * element_bytes(); }

private:
    StateDtype dtype_;
    size_t count_;
    Buffer m_;  // (count) first moment
    Buffer v_;  // (count) second moment
};

}  // namespace dqt
