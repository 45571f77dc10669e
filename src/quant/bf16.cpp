#include "quant/bf16.h"

#include <cstddef>

namespace dqt {

void round_to_bf16_in_place(float* x, size_t count) {
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < count; ++i) x[i] = round_to_bf16(x[i]);
}

}  // namespace dqt
