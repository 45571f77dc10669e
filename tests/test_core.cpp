#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <vector>

#include "core/checksum.h"
#include "core/cpu_cache.h"
#include "core/memory.h"
#include "core/rng.h"
#include "core/row_dealer.h"
#include "core/spin_barrier.h"
#include "test_helpers.h"

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

namespace {

// CRC-32 bit by bit (reflected polynomial 0xEDB88320): the slow reference for crc32_update.
uint32_t crc32_bitwise(uint32_t crc, const uint8_t* data, size_t bytes) {
    crc = ~crc;
    for (size_t i = 0; i < bytes; ++i) {
        crc ^= data[i];
        for (int bit = 0; bit < 8; ++bit) crc = (crc >> 1) ^ (0xEDB88320u & (0u - (crc & 1u)));
    }
    return ~crc;
}

}  // namespace

TEST(Checksum, Crc32MatchesTheBitwiseReferenceOverAnySplit) {
    EXPECT_EQ(crc32_update(0, "123456789", 9), 0xCBF43926u);  // the standard check value
    std::mt19937 gen(20261207);
    std::vector<uint8_t> bytes(1 << 16);
    for (uint8_t& b : bytes) b = static_cast<uint8_t>(gen());
    for (int trial = 0; trial < 50; ++trial) {
        const size_t offset = gen() % 64, count = gen() % (bytes.size() - offset);
        const uint32_t expected = crc32_bitwise(0, bytes.data() + offset, count);
        EXPECT_EQ(crc32_update(0, bytes.data() + offset, count), expected);
        // The same range in pieces, empty ones (with a null pointer, as an empty tensor gives) among them.
        uint32_t running = crc32_update(0, nullptr, 0);
        for (size_t done = 0; done < count;) {
            const size_t piece = std::min<size_t>(count - done, gen() % 3 == 0 ? 0 : gen() % 5000);
            running = crc32_update(running, piece == 0 ? nullptr : bytes.data() + offset + done, piece);
            done += piece;
        }
        EXPECT_EQ(running, expected) << "trial " << trial;
    }
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

// Each round every thread writes its slot, meets the others, and reads every slot: all must
// hold this round's values. Without the barrier a thread reads slots before their owners wrote
// them (and the sanitizer build reports the race). Four threads on two cores also exercise the
// yield after the spin.
TEST(SpinBarrier, EveryWriteBeforeTheMeetingIsSeenAfterIt) {
    constexpr int kThreads = 4, kRounds = 2000;
    std::vector<int> slots(kThreads, -1);
    std::atomic<int> stale_reads{0}, team_size{0};
    SpinBarrier barrier;
#pragma omp parallel num_threads(kThreads)
    {
#pragma omp single
        {
            barrier.set_threads(omp_get_num_threads());
            team_size = omp_get_num_threads();
        }
        const int thread = omp_get_thread_num(), threads = omp_get_num_threads();
        for (int round = 0; round < kRounds; ++round) {
            slots[static_cast<size_t>(thread)] = round * threads + thread;
            barrier.arrive_and_wait();
            for (int other = 0; other < threads; ++other)
                if (slots[static_cast<size_t>(other)] != round * threads + other) ++stale_reads;
            barrier.arrive_and_wait();  // nobody writes the next round before all have read
        }
    }
    EXPECT_GE(team_size.load(), 2) << "the runtime gave one thread: the barrier was not exercised";
    EXPECT_EQ(stale_reads.load(), 0);
}

// Phases of random sizes dealt to four threads that meet between phases, as the inference
// team's products are: every row of every phase goes to exactly one thread, every claim but a
// phase's last starts and ends on the alignment, and the dealer is never reset between phases.
TEST(RowDealer, EachPhasesRowsAreDealtOnceOnAlignedCuts) {
    constexpr int kThreads = 4, kPhases = 300, kAlign = 16;
    std::vector<int> totals;
    for (int p = 0; p < kPhases; ++p)
        totals.push_back(1 + static_cast<int>(dqt::uniform01(7, 0, 0, static_cast<uint64_t>(p)) * 3000));
    std::vector<std::vector<std::atomic<int>>> times_dealt;
    for (int total : totals) times_dealt.emplace_back(static_cast<size_t>(total));
    std::atomic<int> misaligned{0}, team_size{0};
    SpinBarrier barrier;
    RowDealer dealer;
#pragma omp parallel num_threads(kThreads)
    {
#pragma omp single
        {
            barrier.set_threads(omp_get_num_threads());
            team_size = omp_get_num_threads();
            dealer.reset();
        }
        const int threads = omp_get_num_threads();
        int64_t dealt = 0;
        for (int p = 0; p < kPhases; ++p) {
            const int total = totals[static_cast<size_t>(p)];
            int begin = 0, end = 0;
            while (dealer.claim(dealt, total, threads, kAlign, begin, end)) {
                if (begin % kAlign != 0 || (end % kAlign != 0 && end != total) || end <= begin) ++misaligned;
                for (int r = begin; r < end; ++r) ++times_dealt[static_cast<size_t>(p)][static_cast<size_t>(r)];
            }
            dealt += total;
            barrier.arrive_and_wait();
        }
    }
    EXPECT_GE(team_size.load(), 2) << "the runtime gave one thread: the dealing was not shared";
    EXPECT_EQ(misaligned.load(), 0);
    for (int p = 0; p < kPhases; ++p)
        for (int r = 0; r < totals[static_cast<size_t>(p)]; ++r)
            ASSERT_EQ(times_dealt[static_cast<size_t>(p)][static_cast<size_t>(r)].load(), 1) << "phase " << p << " row " << r;
}

TEST(CpuCache, ParsesSysfsSizes) {
    EXPECT_EQ(dqt::parse_cache_size("32768K"), uint64_t{32} << 20);
    EXPECT_EQ(dqt::parse_cache_size("2M"), uint64_t{2} << 20);
    EXPECT_EQ(dqt::parse_cache_size("1G"), uint64_t{1} << 30);
    EXPECT_EQ(dqt::parse_cache_size("512"), uint64_t{512});
    EXPECT_EQ(dqt::parse_cache_size("32768K\n"), uint64_t{32} << 20);
    EXPECT_FALSE(dqt::parse_cache_size(""));
    EXPECT_FALSE(dqt::parse_cache_size("K"));
    EXPECT_FALSE(dqt::parse_cache_size("12X"));
    EXPECT_FALSE(dqt::parse_cache_size("99999999999999999999"));
}

// A cache folder laid out as sysfs lays it out: the largest level among data and unified caches
// wins (an instruction cache never does), and entries that cannot be read are passed over.
TEST(CpuCache, LastLevelIsTheHighestDataOrUnifiedLevel) {
    dqt::testing::TempDir dir("cpu_cache");
    auto index = [&](const std::string& name, const std::string& level, const std::string& type,
                     const std::string& size) {
        std::filesystem::create_directories(dir.path / name);
        std::ofstream(dir.path / name / "level") << level << "\n";
        std::ofstream(dir.path / name / "type") << type << "\n";
        std::ofstream(dir.path / name / "size") << size << "\n";
    };
    EXPECT_EQ(dqt::last_level_cache_bytes(dir.path.string()), 0u);
    index("index0", "1", "Data", "48K");
    index("index1", "1", "Instruction", "32K");
    index("index2", "2", "Unified", "2048K");
    EXPECT_EQ(dqt::last_level_cache_bytes(dir.path.string()), uint64_t{2} << 20);
    index("index3", "3", "Unified", "266240K");
    index("index4", "4", "Instruction", "1G");
    index("index5", "x", "Unified", "1G");
    EXPECT_EQ(dqt::last_level_cache_bytes(dir.path.string()), uint64_t{260} << 20);
    EXPECT_EQ(dqt::last_level_cache_bytes((dir.path / "missing").string()), 0u);
}
