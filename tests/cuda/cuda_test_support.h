#pragma once
// What the GPU tests share: a fixture that skips without a GPU, random inputs from a seed that
// replays (DQT_CUDA_TEST_SEED overrides it), copies to and from the device, and the error measure.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "cuda/device.h"
#include "core/error.h"
#include "cuda/device_memory.h"

namespace dqt::cuda::testing {

class Gpu : public ::testing::Test {
protected:
    void SetUp() override {
        if (gpu_count() == 0) GTEST_SKIP() << "skipped: no GPU";
        require_gpu();
    }
};

inline uint64_t test_seed() {
    const char* text = std::getenv("DQT_CUDA_TEST_SEED");
    return text ? std::strtoull(text, nullptr, 10) : 20261126;
}

inline std::vector<float> random_floats(std::mt19937_64& rng, size_t count, float spread = 1.0f) {
    std::normal_distribution<float> normal(0.0f, spread);
    std::vector<float> values(count);
    for (float& x : values) x = normal(rng);
    return values;
}

template <typename T>
DeviceArray<T> upload(const std::vector<T>& host, MemCategory category = MemCategory::scratch) {
    return to_device(category, host.data(), host.size());
}

template <typename T>
std::vector<T> download(const DeviceArray<T>& device) {
    std::vector<T> host(device.size());
    copy_to_host(host.data(), device.data(), device.bytes());
    return host;
}

// max |actual - expected| / max |expected|.
inline double relative_error(const std::vector<float>& actual, const std::vector<float>& expected) {
    double worst = 0.0, largest = 0.0;
    for (size_t i = 0; i < expected.size(); ++i) {
        worst = std::max(worst, std::fabs(static_cast<double>(actual[i]) - expected[i]));
        largest = std::max(largest, std::fabs(static_cast<double>(expected[i])));
    }
    return largest > 0.0 ? worst / largest : worst;
}

}  // namespace dqt::cuda::testing
