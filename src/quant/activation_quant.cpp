#include "quant/activation_quant.h"

#include <cstddef>
#include <vector>

#include "kernels/int8_rows.h"

namespace dqt {

void absmax_quantize_rows(float* x, int rows, int cols) {
#pragma omp parallel
    {
        std::vector<int8_t> a(static_cast<size_t>(cols));  // per thread
#pragma omp for schedule(static)
        for (int r = 0; r < rows; ++r) {
            float* row = x + static_cast<size_t>(r) * cols;
            const float scale = quantize_row_int8(row, cols, a.data(), nullptr);
            for (int j = 0; j < cols; ++j) row[j] = static_cast<float>(a[j]) / scale;
        }
    }
}

}  // namespace dqt
