#include "model/gradient_sink.h"

#include <algorithm>
#include <vector>

namespace dqt {

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
