#pragma once
// The size of this machine's last-level cache, read at run time from Linux's sysfs. A model
// whose bytes read per token fit in it decodes from the cache, not from memory, so its speed
// says nothing about the memory-bandwidth bound (dqt bench generate reports which regime a
// figure is in).
#include <cstdint>
#include <optional>
#include <string>

namespace dqt {

// Bytes of a sysfs cache size ("32768K", "2M", "512"); nullopt for anything else.
std::optional<uint64_t> parse_cache_size(const std::string& text);

// The largest data or unified cache level's size under `cache_dir` (a CPU's cache folder,
// index*/level, type and size); 0 when none can be read.
uint64_t last_level_cache_bytes(const std::string& cache_dir = "/sys/devices/system/cpu/cpu0/cache");

}  // namespace dqt
