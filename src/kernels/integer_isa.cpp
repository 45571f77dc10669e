#include "kernels/integer_isa.h"

#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace dqt {

namespace {

// AMX-TILE and AMX-INT8, and the tile state granted to this process.
bool amx_int8_usable() {
    static const bool usable = [] {
        unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
        if (__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) == 0) return false;
        const bool tile = (edx >> 24) & 1, int8 = (edx >> 25) & 1;
        if (!tile || !int8) return false;
        // Linux gives a process the 8 KiB tile state only on request; without it the first tile
        // instruction faults. The permission holds for every thread of the process.
        constexpr long kRequestComponentPermission = 0x1023;  // ARCH_REQ_XCOMP_PERM
        constexpr long kTileDataComponent = 18;               // XFEATURE_XTILEDATA
        return syscall(SYS_arch_prctl, kRequestComponentPermission, kTileDataComponent) == 0;
    }();
    return usable;
}

}  // namespace

const char* integer_isa_name(IntegerIsa isa) {
    switch (isa) {
        case IntegerIsa::scalar: return "scalar";
        case IntegerIsa::avx2: return "avx2";
        case IntegerIsa::avx512_vnni: return "avx512-vnni";
        case IntegerIsa::avx512_amx: return "avx512-amx";
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
        case IntegerIsa::avx512_amx: return integer_isa_supported(IntegerIsa::avx512_vnni) && amx_int8_usable();
    }
    return false;
}

IntegerIsa best_integer_isa() {
    static const IntegerIsa best = integer_isa_supported(IntegerIsa::avx512_amx)    ? IntegerIsa::avx512_amx
                                   : integer_isa_supported(IntegerIsa::avx512_vnni) ? IntegerIsa::avx512_vnni
                                   : integer_isa_supported(IntegerIsa::avx2)      ? IntegerIsa::avx2
                                                                                  : IntegerIsa::scalar;
    return best;
}

bool runs_avx512_vnni(IntegerIsa isa) { return isa == IntegerIsa::avx512_vnni || isa == IntegerIsa::avx512_amx; }

}  // namespace dqt
