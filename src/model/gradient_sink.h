#pragma once
// Where model_backward puts each parameter's gradient. For every tensor, backward walks its
// rows in pieces of ParamTensor::piece_rows (set by the layout, so every sink sees the same
// pieces and computes the same bits) and, per piece, calls acquire,
// accumulates that piece's gradient of this micro-batch into the buffer it got, and calls
// release: the piece's gradient is then complete. A sink may keep every gradient (a step's
// GradientAccumulator, model/gradient_accumulator.h; the tests' GradientBuffer) or update the
// weights at once and drop it (optim/fused_update.h).
#include <cstddef>
#include <vector>

#include "core/memory.h"
#include "model/parameters.h"

namespace dqt {

class GradientSink {
public:
    virtual ~GradientSink() = default;
    // A buffer of (row_end - row_begin, tensor.cols) to accumulate into.
    virtual float* acquire(const ParamTensor& tensor, int row_begin, int row_end) = 0;
    virtual void release(const ParamTensor& tensor, int row_begin, int row_end) = 0;
};

// Gradient norms sum squares in double over chunks of kSquareSumChunk values, each chunk in
// index order, then the chunks' sums in order: the same bits for any thread count, and for
// any number of data-parallel ranks when each chunk lies on one rank.
inline constexpr size_t kSquareSumChunk = size_t{1} << 14;
// The chunk sums of x (count values, x at the start of a chunk).
std::vector<double> chunk_sums_of_squares(const float* x, size_t count);
// Their sum in order.
double sum_in_order(const std::vector<double>& chunk_sums);
double sum_of_squares(const float* x, size_t count);

}  // namespace dqt
