#include "kernels/rope.h"

#include <cmath>
#include <cstddef>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/memory.h"

namespace dqt {

RopeTable::RopeTable(int seq, int head_dim_, int pos0, float theta)
    : positions(seq), head_dim(head_dim_),
      cos(MemCategory::scratch, static_cast<size_t>(seq) * (head_dim_ / 2)),
      sin(MemCategory::scratch, static_cast<size_t>(seq) * (head_dim_ / 2)) {
    require(head_dim % 2 == 0, "rope: head_dim must be even, got " + std::to_string(head_dim));
    const int pairs = head_dim / 2;
    std::vector<double> inv_freq(pairs);  // theta^(-2i / head_dim)
    for (int i = 0; i < pairs; ++i) inv_freq[i] = std::pow(static_cast<double>(theta), -2.0 * i / head_dim);
#pragma omp parallel for schedule(static) if (seq > 1)
    for (int t = 0; t < seq; ++t)
        for (int i = 0; i < pairs; ++i) {
            const double angle = static_cast<double>(pos0 + t) * inv_freq[i];
            cos[static_cast<size_t>(t) * pairs + i] = static_cast<float>(std::cos(angle));
            sin[static_cast<size_t>(t) * pairs + i] = static_cast<float>(std::sin(angle));
        }
}

namespace {

// Rotates every pair of heads [head_begin, head_end) of one token's row by the angles of one
// table row (cos, sin: head_dim / 2 each), negated when sign is -1.
void rotate_heads(float* row, int head_begin, int head_end, int head_dim, const float* cos, const float* sin,
                  float sign) {
    const int pairs = head_dim / 2;
    for (int h = head_begin; h < head_end; ++h) {
        float* head = row + static_cast<size_t>(h) * head_dim;  // (head_dim)
        for (int i = 0; i < pairs; ++i) {
            const float x0 = head[2 * i], x1 = head[2 * i + 1], s = sign * sin[i];
            head[2 * i] = x0 * cos[i] - x1 * s;
            head[2 * i + 1] = x0 * s + x1 * cos[i];
        }
    }
}

// Rotates every pair by the angle of table row first_row + t, negated when inverse is set.
void rope_apply(float* x, int batch, int seq, int heads, const RopeTable& table, int first_row, bool inverse) {
    const int head_dim = table.head_dim, pairs = head_dim / 2;
    const float sign = inverse ? -1.0f : 1.0f;
#pragma omp parallel for schedule(static) if (batch * seq > 1)  // one token (decode): no threads to wake
    for (int bt = 0; bt < batch * seq; ++bt) {
        const size_t table_row = static_cast<size_t>(first_row + bt % seq) * pairs;
        rotate_heads(x + static_cast<size_t>(bt) * heads * head_dim, 0, heads, head_dim,
                     table.cos.data() + table_row, table.sin.data() + table_row, sign);
    }
}

}  // namespace

void rope_forward(float* x, int batch, int seq, int heads, int head_dim, int pos0, float theta) {
    rope_apply(x, batch, seq, heads, RopeTable(seq, head_dim, pos0, theta), 0, false);
}

void rope_forward_heads(float* x, int seq, size_t row_stride, int head_begin, int head_end, const RopeTable& table,
                        int first_row) {
    if (first_row < 0 || first_row + seq > table.positions)  // not require(): no message built per call
        throw Error("rope: rows " + std::to_string(first_row) + " to " + std::to_string(first_row + seq) +
                    " lie outside a table of " + std::to_string(table.positions) + " positions");
    const size_t pairs = static_cast<size_t>(table.head_dim / 2);
    for (int t = 0; t < seq; ++t) {
        const size_t table_row = static_cast<size_t>(first_row + t) * pairs;
        rotate_heads(x + t * row_stride, head_begin, head_end, table.head_dim, table.cos.data() + table_row,
                     table.sin.data() + table_row, 1.0f);
    }
}

void rope_backward(float* dx, int batch, int seq, int heads, int head_dim, int pos0, float theta) {
    rope_apply(dx, batch, seq, heads, RopeTable(seq, head_dim, pos0, theta), 0, true);
}

}  // namespace dqt
