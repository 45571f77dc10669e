#include <gtest/gtest.h>

#include "core/memory.h"
#include "core/rng.h"

using namespace dqt;

TEST(Philox, MatchesRandom123KnownAnswer) {
    // Known-answer vector of Philox4x32-10 from the Random123 distribution (counter 0, key 0).
    const auto words = philox4x32(0, 0, 0, 0);
    EXPECT_EQ(words[0], 0x6627e8d5u);
    EXPECT_EQ(words[1], 0xe169c58du);
    EXPECT_EQ(words[2], 0xbc57ac4cu);
    EXPECT_EQ(words[3], 0x9b00dbd8u);
}

TEST(Philox, UniformMeanAndRange) {
    double sum = 0;
    const int count = 100000;
    for (int i = 0; i < count; ++i) {
        const float u = uniform01(42, kStreamRounding, 7, i);
        ASSERT_GE(u, 0.0f);
        ASSERT_LT(u, 1.0f);
        sum += u;
    }
    // Standard error of the mean of U[0,1) over 1e5 draws is about 0.0009.
    EXPECT_NEAR(sum / count, 0.5, 0.005);
}

TEST(Memory, LedgerTracksLiveAndPeakPerCategory) {
    const int64_t before = memory_live_bytes(MemCategory::scratch);
    memory_reset_peaks();
    {
        Array<float> a(MemCategory::scratch, 1000);
        EXPECT_EQ(memory_live_bytes(MemCategory::scratch) - before, 4000);
        EXPECT_EQ(reinterpret_cast<uintptr_t>(a.data()) % 64, 0u);
    }
    EXPECT_EQ(memory_live_bytes(MemCategory::scratch), before);
    EXPECT_EQ(memory_peak_bytes(MemCategory::scratch) - before, 4000);
}
