#pragma once
// The instruction-set paths of the integer kernels (kernels/ternary_matmul.h,
// kernels/int8_matmul.h), picked at run time by CPU features: the build has no -march flag.
namespace dqt {

enum class IntegerIsa { scalar, avx2, avx512_vnni };
const char* integer_isa_name(IntegerIsa isa);  // "scalar", "avx2", "avx512-vnni"
bool integer_isa_supported(IntegerIsa isa);    // by this CPU's features
IntegerIsa best_integer_isa();                 // the fastest supported path

}  // namespace dqt
