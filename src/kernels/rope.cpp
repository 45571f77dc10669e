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

// Rotates every pair by the angle of table row first_row + t, negated when inverse is set.
void rope_apply(float* x, int batch, int seq, int heads, const RopeTable& table, int first_row, bool inverse) {
    const int head_dim = table.head_dim, pairs = head_dim / 2;
    const float sign = inverse ? -1.0f : 1.0f;
#pragma omp parallel for schedule(static) if (batch * seq > 1)  // one token (decode): no threads to wake
    for (int bt = 0; bt < batch * seq; ++bt) {
        const int t = bt % seq;
        const float* cos = table.cos.data() + static_cast<size_t>(first_row + t) * pairs;  // (pairs)
        const float* sin = table.sin.data() + static_cast<size_t>(first_row + t) * pairs;  // (pairs)
        for (int h = 0; h < heads; ++h) {
            float* row = x + (static_cast<size_t>(bt) * heads + h) * head_dim;  // (head_dim)
            for (int i = 0; i < pairs; ++i) {
                const float x0 = row[2 * i], x1 = row[2 * i + 1], s = sign * sin[i];
                row[2 * i] = x0 * cos[i] - x1 * s;
                row[2 * i + 1] = x0 * s + x1 * cos[i];
            }
        }
    }
}

}  // namespace

void rope_forward(float* x, int batch, int seq, int heads, int head_dim, int pos0, float theta) {
    rope_apply(x, batch, seq, heads, RopeTable(seq, head_dim, pos0, theta), 0, false);
}

void rope_forward(float* x, int seq, int heads, const RopeTable& table, int first_row) {
    if (first_row < 0 || first_row + seq > table.positions)  // not require(): no message built per call
        throw Error("rope: rows " + std::to_string(first_row) + " to " + std::to_string(first_row + seq) +
                    " lie outside a table of " + std::to_string(table.positions) + " positions");
    rope_apply(x, 1, seq, heads, table, first_row, false);
}

void rope_backward(float* dx, int batch, int seq, int heads, int head_dim, int pos0, float theta) {
    rope_apply(dx, batch, seq, heads, RopeTable(seq, head_dim, pos0, theta), 0, true);
}

}  // namespace dqt
