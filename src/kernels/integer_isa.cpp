#include "kernels/integer_isa.h"

namespace dqt {

const char* integer_isa_name(IntegerIsa isa) {
    switch (isa) {
        case IntegerIsa::scalar: return "scalar";
        case IntegerIsa::avx2: return "avx2";
        case IntegerIsa::avx512_vnni: return "avx512-vnni";
    }
    return "?";
}

bool integer_isa_supported(IntegerIsa isa) {
    switch (isa) {
        case IntegerIsa::scalar: return true;
        case IntegerIsa::avx2: return __builtin_cpu_supports("avx2");
        case IntegerIsa::avx512_vnni:
            return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                   __builtin_cpu_supports("avx512vnni");
    }
    return false;
}

IntegerIsa best_integer_isa() {
    static const IntegerIsa best = integer_isa_supported(IntegerIsa::avx512_vnni) ? IntegerIsa::avx512_vnni
                                   : integer_isa_supported(IntegerIsa::avx2)      ? IntegerIsa::avx2
                                                                                  : IntegerIsa::scalar;
    return best;
}

}  // namespace dqt
