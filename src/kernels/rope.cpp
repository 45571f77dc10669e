#include "kernels/rope.h"

#include <cmath>
#include <cstddef>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/memory.h"

namespace dqt {
namespace {

// cos and sin of every (position, pair) angle, computed in double once per call: the table
// has seq * head_dim / 2 entries, far fewer than the batch * seq * heads * head_dim it serves.
struct RopeTable {
    Array<float> cos, sin;  // (seq, head_dim / 2)

    RopeTable(int seq, int head_dim, int pos0, float theta)
        : cos(MemCategory::scratch, static_cast<size_t>(seq) * (head_dim / 2)),
          sin(MemCategory::scratch, static_cast<size_t>(seq) * (head_dim / 2)) {
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
};

// Rotates every pair by the table angle, negated when inverse is set.
void rope_apply(float* x, int batch, int seq, int heads, int head_dim, int pos0, float theta, bool inverse) {
    require(head_dim % 2 == 0, "rope: head_dim must be even, got " + std::to_string(head_dim));
    const RopeTable table(seq, head_dim, pos0, theta);
    const int pairs = head_dim / 2;
    const float sign = inverse ? -1.0f : 1.0f;
#pragma omp parallel for schedule(static) if (batch * seq > 1)  // one token (decode): no threads to wake
    for (int bt = 0; bt < batch * seq; ++bt) {
        const int t = bt % seq;
        const float* cos = table.cos.data() + static_cast<size_t>(t) * pairs;  // (pairs)
        const float* sin = table.sin.data() + static_cast<size_t>(t) * pairs;  // (pairs)
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
    rope_apply(x, batch, seq, heads, head_dim, pos0, theta, false);
}

void rope_backward(float* dx, int batch, int seq, int heads, int head_dim, int pos0, float theta) {
    rope_apply(dx, batch, seq, heads, head_dim, pos0, theta, true);
}

}  // namespace dqt
