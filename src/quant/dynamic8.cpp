#include "quant/dynamic8.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace dqt {

namespace {

DynamicMap build_map(bool is_signed) {
    std::vector<double> values = {0.0, 1.0};
    for (int decade = 0; decade < 7; ++decade) {
        const int parts = is_signed ? (1 << decade) : (1 << (decade + 1));
        const double unit = std::pow(10.0, decade - 6);
        for (int k = 0; k < parts; ++k) {
            const double lower = 0.1 + 0.9 * k / parts, upper = 0.1 + 0.9 * (k + 1) / parts;
            const double mid = unit * (lower + upper) / 2.0;
            values.push_back(mid);
            if (is_signed) values.push_back(-mid);
        }
    }
    std::sort(values.begin(), values.end());
    DynamicMap map;
    for (int i = 0; i < 256; ++i) map.values[i] = static_cast<float>(values[static_cast<size_t>(i)]);
    for (int i = 0; i < 255; ++i) map.thresholds[i] = (map.values[i] + map.values[i + 1]) / 2.0f;
    return map;
}

// Index of the first threshold >= x, by binary search: the nearest value's code (a value
// exactly on a threshold goes to the lower entry).
inline uint8_t nearest_code(float x, const DynamicMap& map) {
    int lo = 0, hi = 255;  // answer in [lo, hi]
    while (lo < hi) {
        const int mid = (lo + hi) / 2;
        if (map.thresholds[mid] < x) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    return static_cast<uint8_t>(lo);
}

}  // namespace

const DynamicMap& dynamic_map_signed() {
    static const DynamicMap map = build_map(true);
    return map;
}

const DynamicMap& dynamic_map_unsigned() {
    static const DynamicMap map = build_map(false);
    return map;
}

float quantize_block8(uint8_t* codes, const float* x, size_t n, const DynamicMap& map) {
    float absmax = 0.0f;
    for (size_t i = 0; i < n; ++i) absmax = std::max(absmax, std::fabs(x[i]));
    const float inv = absmax > 0.0f ? 1.0f / absmax : 0.0f;
    for (size_t i = 0; i < n; ++i) codes[i] = nearest_code(x[i] * inv, map);
    return absmax;
}

void dequantize_block8(float* x, const uint8_t* codes, size_t n, float absmax, const DynamicMap& map) {
    for (size_t i = 0; i < n; ++i) x[i] = map.values[codes[i]] * absmax;
}

uint8_t nearest_code_reference(float normalized, const DynamicMap& map) {
    int best = 0;
    for (int i = 1; i < 256; ++i) {
        if (std::fabs(map.values[i] - normalized) < std::fabs(map.values[best] - normalized)) best = i;
    }
    return static_cast<uint8_t>(best);
}

}  // namespace dqt
