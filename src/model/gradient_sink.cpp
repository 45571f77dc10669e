#include "model/gradient_sink.h"

#include <algorithm>
#include <numeric>
#include <vector>

namespace dqt {

int gradient_piece_rows(const ParamLayout& layout, const ParamTensor& tensor) {
    if (tensor.role != TensorRole::embedding && tensor.role != TensorRole::head) return tensor.rows;
    size_t largest_block_linear = 0;
    for (const ParamTensor& other : layout.tensors) {
        if (other.role == TensorRole::block_linear) largest_block_linear = std::max(largest_block_linear, other.count());
    }
    // Rows in steps of `unit`, so that every piece starts at a multiple of kGradientPieceAlign.
    const size_t cols = static_cast<size_t>(tensor.cols);
    const size_t unit = kGradientPieceAlign / std::gcd(cols, kGradientPieceAlign);
    const size_t rows = std::max(unit, largest_block_linear / cols / unit * unit);
    return static_cast<int>(std::min(rows, static_cast<size_t>(tensor.rows)));
}

std::vector<double> chunk_sums_of_squares(const float* x, size_t count) {
    const size_t chunks = (count + kSquareSumChunk - 1) / kSquareSumChunk;
    std::vector<double> sums(chunks, 0.0);
#pragma omp parallel for schedule(static)
    for (size_t chunk = 0; chunk < chunks; ++chunk) {
        const size_t end = std::min(count, (chunk + 1) * kSquareSumChunk);
        double sum = 0.0;
        for (size_t i = chunk * kSquareSumChunk; i < end; ++i) sum += static_cast<double>(x[i]) * x[i];
        sums[chunk] = sum;
    }
    return sums;
}

double sum_in_order(const std::vector<double>& chunk_sums) {
    double sum = 0.0;
    for (double value : chunk_sums) sum += value;
    return sum;
}

double sum_of_squares(const float* x, size_t count) { return sum_in_order(chunk_sums_of_squares(x, count)); }

}  // namespace dqt
