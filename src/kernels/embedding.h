#pragma once
// Token embedding lookup. Token ids must lie in [0, vocab): the caller validates them (the data
// loader checks every token against the vocabulary), these kernels do not know vocab.
#include <cstdint>

namespace dqt {

// out (count, dim) = rows tokens[t] of table (vocab, dim).
void embedding_forward(float* out, const int32_t* tokens, const float* table, int count, int dim);

// dtable (vocab, dim) += scatter of dout (count, dim) onto rows tokens[t]. Each element sums its
// contributions in token order, so the result is the same for any thread count.
void embedding_backward(float* dtable, const float* dout, const int32_t* tokens, int count, int dim);

// The same for table rows [row_begin, row_end) only: drows (row_end - row_begin, dim) holds
// those rows; tokens outside the range are skipped. Same summation order per element.
void embedding_backward_rows(float* drows, const float* dout, const int32_t* tokens, int count, int dim,
                             int row_begin, int row_end);

}  // namespace dqt
