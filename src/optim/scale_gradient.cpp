#include "optim/scale_gradient.h"

#include <algorithm>

namespace dqt {

ExactSum code_gradient_dot(const float* g, const uint8_t* codes, const CodeGrid& grid, size_t first, size_t last) {
    // Blocks of 2^10 terms add up in an int64 (each term is at most 2^52 in fixed point).
    constexpr size_t kBlock = size_t{1} << (62 - kExactSumFractionBits - kExactSumTermBits);
    ExactSum total = 0;
    for (size_t begin = first; begin < last; begin += kBlock) {
        const size_t end = std::min(begin + kBlock, last);
        int64_t block = 0;
        for (size_t i = begin; i < end; ++i) {
            block += exact_term(static_cast<double>(g[i - first]) * read_code(codes, grid, i));
        }
        total += block;
    }
    return total;
}

}  // namespace dqt
