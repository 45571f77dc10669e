#include "optim/optimizer_state.h"

#include "core/error.h"

namespace dqt {

StateDtype parse_state_dtype(const std::string& bits) {
    if (bits == "32") return StateDtype::fp32;
    if (bits == "16") return StateDtype::bf16;
    throw Error("--optim-state " + bits + " is not supported: use 32 (fp32) or 16 (bf16)");
}

const char* state_dtype_bits(StateDtype dtype) { return dtype == StateDtype::fp32 ? "32" : "16"; }

OptimizerState::OptimizerState(size_t count, StateDtype dtype)
    : dtype_(dtype),
      count_(count),
      m_(MemCategory::optimizer, count * (dtype == StateDtype::fp32 ? 4 : 2)),
      v_(MemCategory::optimizer, count * (dtype == StateDtype::fp32 ? 4 : 2)) {}

}  // namespace dqt
