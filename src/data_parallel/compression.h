#pragma once
// Which transfers of a data-parallel step go compressed (train --compress-gradients,
// --compress-weights): bits per value on the wire, 0 for fp32. Nothing is compressed on one
// rank (nothing is sent).
#include <string>

namespace dqt {

struct CommCompression {
    int gradient_bits = 0;  // 0, 8 or 4: the reduce-scatter, with error feedback
    int weight_bits = 0;    // 0, 8 or 4: the all-gather of fp32 values, as differences
    bool any() const { return gradient_bits != 0 || weight_bits != 0; }
};

// "fp32" for 0, else "N-bit".
inline std::string compression_label(int bits) { return bits == 0 ? "fp32" : std::to_string(bits) + "-bit"; }

}  // namespace dqt
