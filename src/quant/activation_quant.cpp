#include "quant/activation_quant.h"

#include <cstddef>
#include <vector>

#include "kernels/int8_rows.h"

namespace dqt {

float fake_quantize_row(float* x, int cols, int8_t* a) {
    const float scale = quantize_row_int8(x, cols, a, nullptr);
    for (int j = 0; j < cols; ++j) x[j] = static_cast<float>(a[j]) / scale;
    return scale;
}

void absmax_quantize_rows(float* x, int rows, int cols) {
#pragma omp parallel
    {
        std::vector<int8_t> a(static_cast<size_t>(cols));  // per thread
#pragma omp for schedule(static)
        for (int r = 0; r < rows; ++r) fake_quantize_row(x + static_cast<size_t>(r) * cols, cols, a.data());
    }
}

}  // namespace dqt
