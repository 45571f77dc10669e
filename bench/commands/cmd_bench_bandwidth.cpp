// `dqt bench bandwidth`: the read bandwidth by data size, so that a figure can say whether a
// model's bytes came from a cache or from memory. sysfs may not tell: some VMs report the whole
// package's L3 (300 MiB on one Intel Xeon here) where the guest holds a much smaller share, and
// some report nothing. Each size is read back by the same loop `bench generate` holds decode to
// (kernels/read_bandwidth.h), with the run's threads, best of --passes.
#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench_commands.h"
#include "cache_regime.h"
#include "commands.h"
#include "core/cpu_cache.h"
#include "core/error.h"
#include "core/memory.h"
#include "core/parallel.h"

namespace dqt::cli {

namespace {

struct BenchBandwidthArgs {
    std::vector<int> mib = {8, 32, 128, 512, 2048};
    int passes = 5;
    int threads = 0;
    bool json = false;
};

}  // namespace

void add_bench_bandwidth_command(CLI::App& bench) {
    auto args = std::make_shared<BenchBandwidthArgs>();
    CLI::App* command = bench.add_subcommand(
        "bandwidth", "read bandwidth by data size: which sizes read back from a cache, and the rate beyond it");
    command->add_option("--mib", args->mib, "data sizes to read back, MiB (a model's bytes a token, for one)")
        ->check(positive_whole_number())
        ->capture_default_str();
    command->add_option("--passes", args->passes, "passes over each size; the best counts")
        ->check(positive_whole_number())
        ->capture_default_str();
    add_threads_flag(*command, args->threads);
    command->add_flag("--json", args->json, "print one JSON object");
    command->callback([args] {
        set_num_threads(args->threads);
        // Half the physical memory at most: the buffer is touched whole, and the rest of the
        // machine keeps running.
        for (const int mib : args->mib)
            require(mib * 1048576.0 <= static_cast<double>(physical_memory_bytes()) / 2,
                    "--mib " + std::to_string(mib) + " is more than half this machine's memory");
        const uint64_t cache_bytes = last_level_cache_bytes();
        ReadBandwidth beyond(cache_bytes);
        const uint64_t beyond_bytes = beyond.buffer_bytes();
        const double beyond_rate = best_read_rate(std::move(beyond), args->passes);
        nlohmann::json sizes = nlohmann::json::array();
        for (const int mib : args->mib) {
            const uint64_t bytes = static_cast<uint64_t>(mib) << 20;
            const double rate = best_read_rate(ReadBandwidth::over_exactly(bytes), args->passes);
            sizes.push_back({{"mib", mib}, {"gb_per_s", rate / 1e9}, {"over_beyond_cache", rate / beyond_rate}});
        }
        const nlohmann::json record = {{"bench", "bandwidth"},
                                       {"threads", num_threads()},
                                       {"last_level_cache_bytes", cache_bytes},
                                       {"beyond_cache_buffer_bytes", beyond_bytes},
                                       {"beyond_cache_gb_per_s", beyond_rate / 1e9},
                                       {"sizes", sizes}};
        if (args->json) {
            std::printf("%s\n", record.dump().c_str());
            return;
        }
        std::printf("bench bandwidth: %d threads, last-level cache %s\n", num_threads(),
                    cache_bytes > 0 ? (std::to_string(cache_bytes >> 20) + " MiB (sysfs)").c_str() : "unreadable");
        std::printf("  beyond the cache (%.0f MiB): %.1f GB/s\n",
                    static_cast<double>(beyond_bytes) / 1048576.0, beyond_rate / 1e9);
        for (const auto& size : sizes)
            std::printf("  %6d MiB: %6.1f GB/s (%.2fx)\n", size["mib"].get<int>(), size["gb_per_s"].get<double>(),
                        size["over_beyond_cache"].get<double>());
        std::printf("  sizes well above 1x read back from a cache; at about 1x, from memory\n");
    });
}

}  // namespace dqt::cli
