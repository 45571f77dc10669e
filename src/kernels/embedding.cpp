#include "kernels/embedding.h"

#include <algorithm>
#include <cstdint>
#include <cstddef>
#include <cstring>

namespace dqt {

void embedding_forward(float* out, const int32_t* tokens, const float* table, int count, int dim) {
#pragma omp parallel for schedule(static)
    for (int t = 0; t < count; ++t)
        std::memcpy(out + static_cast<size_t>(t) * dim, table + static_cast<size_t>(tokens[t]) * dim,
                    sizeof(float) * dim);
}

void embedding_backward(float* dtable, const float* dout, const int32_t* tokens, int count, int dim) {
    embedding_backward_rows(dtable, dout, tokens, count, dim, 0, INT32_MAX);
}

void embedding_backward_rows(float* drows, const float* dout, const int32_t* tokens, int count, int dim,
                             int row_begin, int row_end) {
    // Repeated tokens hit the same row, so threads split the columns (one cache line each)
    // rather than the tokens: no two threads ever touch the same element.
    constexpr int kBlock = 16;
    const int blocks = (dim + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static)
    for (int blk = 0; blk < blocks; ++blk) {
        const int c0 = blk * kBlock, width = std::min(kBlock, dim - c0);
        for (int t = 0; t < count; ++t) {
            if (tokens[t] < row_begin || tokens[t] >= row_end) continue;
            float* dst = drows + static_cast<size_t>(tokens[t] - row_begin) * dim + c0;
            const float* src = dout + static_cast<size_t>(t) * dim + c0;
            for (int c = 0; c < width; ++c) dst[c] += src[c];
        }
    }
}

}  // namespace dqt
