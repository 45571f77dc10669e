#pragma once
// 8-bit block-wise quantization of optimizer state (Dettmers et al., arXiv 2110.02861): a
// block of values is stored as its absmax (fp32) and one byte per value, an index into a
// non-linear "dynamic" map of 256 values in [-1, 1] that is dense near zero and near one, so
// both the small and the large magnitudes of Adam's moments keep a few significant digits.
//
// The map: for decade i = 0..6 (values 10^(i-6) x [0.1, 1]) the midpoints of 2^i equal
// sub-intervals (signed map, plus their negatives) or of 2^(i+1) (unsigned map, for the second
// moment, which is never negative); then 0 and 1. Signed: 2 x 127 + 2 = 256 values; unsigned:
// 254 + 2 = 256.
#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace dqt {

struct DynamicMap {
    std::array<float, 256> values;      // ascending
    std::array<float, 255> thresholds;  // midpoints between neighbours: code = #thresholds below x
    // For the top 16 bits of a float's order-preserving key: the number of thresholds below
    // every float with those bits. Quantizing starts there and steps up past the one or two
    // thresholds left, instead of a binary search over all 255.
    std::vector<uint8_t> bucket_start;  // (65536)
};

const DynamicMap& dynamic_map_signed();
const DynamicMap& dynamic_map_unsigned();

// codes[0, n) = nearest map entry of x[i] / absmax (ties to the lower entry); returns absmax.
float quantize_block8(uint8_t* codes, const float* x, size_t n, const DynamicMap& map);
// x[i] = map.values[codes[i]] * absmax.
void dequantize_block8(float* x, const uint8_t* codes, size_t n, float absmax, const DynamicMap& map);

// Reference: the nearest entry by a linear scan over all 256 values.
uint8_t nearest_code_reference(float normalized, const DynamicMap& map);

}  // namespace dqt
