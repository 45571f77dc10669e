#include "quant/dynamic8.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <vector>

namespace dqt {

namespace {

// An unsigned key that orders like the floats (negative floats reversed below the positive).
inline uint32_t order_key(float x) {
    const uint32_t bits = std::bit_cast<uint32_t>(x);
    return bits & 0x80000000u ? ~bits : bits | 0x80000000u;
}

inline float from_order_key(uint32_t key) {
    return std::bit_cast<float>(key & 0x80000000u ? key & 0x7fffffffu : ~key);
}

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
    map.bucket_start.resize(65536);
    for (uint32_t bucket = 0; bucket < 65536; ++bucket) {
        const float smallest = from_order_key(bucket << 16);  // the least float of the bucket
        const auto below = std::lower_bound(map.thresholds.begin(), map.thresholds.end(), smallest);
        // NaN buckets compare false everywhere; any start is fine for them.
        map.bucket_start[bucket] = static_cast<uint8_t>(below - map.thresholds.begin());
    }
    return map;
}

// Index of the first threshold >= x: the nearest value's code (a value exactly on a
// threshold goes to the lower entry).
inline uint8_t nearest_code(float x, const DynamicMap& map) {
    int code = map.bucket_start[order_key(x) >> 16];
    while (code < 255 && map.thresholds[static_cast<size_t>(code)] < x) ++code;
    return static_cast<uint8_t>(code);
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
