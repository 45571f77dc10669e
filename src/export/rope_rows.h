#pragma once
// dqt rotates adjacent pairs (x[2i], x[2i+1]) of each head (kernels/rope.h); llama.cpp's NEOX
// mode and Hugging Face's rotate_half rotate (x[i], x[i + d/2]). A file in the half-split
// convention holds the rows of attn_q and attn_k permuted inside each head, which leaves q.k
// unchanged: file row h*d + i holds model row h*d + 2i, file row h*d + d/2 + i model row
// h*d + 2i + 1.
#include <cstddef>
#include <cstring>
#include <vector>

namespace dqt {

// The model row that file row `row` holds.
inline int rope_source_row(int row, int head_dim) {
    const int head = row / head_dim, within = row % head_dim, half = head_dim / 2;
    return head * head_dim + (within < half ? 2 * within : 2 * (within - half) + 1);
}

// A (rows, cols) matrix in model row order, rows in the file's order (unchanged unless permute).
template <typename T>
std::vector<T> rows_in_file_order(const std::vector<T>& rows_major, int rows, int cols, int head_dim, bool permute) {
    if (!permute) return rows_major;
    std::vector<T> out(rows_major.size());
    for (int r = 0; r < rows; ++r)
        std::memcpy(&out[static_cast<size_t>(r) * cols], &rows_major[static_cast<size_t>(rope_source_row(r, head_dim)) * cols],
                    static_cast<size_t>(cols) * sizeof(T));
    return out;
}

// The inverse: a matrix in the file's row order, back in model row order.
template <typename T>
std::vector<T> rows_in_model_order(const std::vector<T>& file_rows, int rows, int cols, int head_dim, bool permute) {
    if (!permute) return file_rows;
    std::vector<T> out(file_rows.size());
    for (int r = 0; r < rows; ++r)
        std::memcpy(&out[static_cast<size_t>(rope_source_row(r, head_dim)) * cols], &file_rows[static_cast<size_t>(r) * cols],
                    static_cast<size_t>(cols) * sizeof(T));
    return out;
}

}  // namespace dqt
