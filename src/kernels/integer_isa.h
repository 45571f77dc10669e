#pragma once
// The instruction-set paths of the integer kernels (kernels/ternary_matmul.h,
// kernels/int8_matmul.h), picked at run time by CPU features: the build has no -march flag.
namespace dqt {

// avx512_amx is avx512_vnni whose small batches (kAmxMinRows to 16 activation rows,
// kernels/ternary_tiles.h) of the ternary product run on Intel's AMX tiles; everything else runs
// the avx512_vnni code.
enum class IntegerIsa { scalar, avx2, avx512_vnni, avx512_amx };
const char* integer_isa_name(IntegerIsa isa);  // "scalar", "avx2", "avx512-vnni", "avx512-amx"
bool integer_isa_supported(IntegerIsa isa);    // by this CPU's features
IntegerIsa best_integer_isa();                 // the fastest supported path
bool runs_avx512_vnni(IntegerIsa isa);         // avx512_vnni, or avx512_amx outside its AMX kernel

}  // namespace dqt
