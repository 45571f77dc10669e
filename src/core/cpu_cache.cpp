#include "core/cpu_cache.h"

#include <cctype>
#include <filesystem>
#include <fstream>

namespace dqt {

std::optional<uint64_t> parse_cache_size(const std::string& text) {
    size_t digits = 0;
    while (digits < text.size() && std::isdigit(static_cast<unsigned char>(text[digits]))) ++digits;
    if (digits == 0 || digits > 12) return std::nullopt;  // up to a terabyte of cache
    uint64_t value = std::stoull(text.substr(0, digits));
    std::string unit = text.substr(digits);
    while (!unit.empty() && std::isspace(static_cast<unsigned char>(unit.back()))) unit.pop_back();
    if (unit == "K") return value << 10;
    if (unit == "M") return value << 20;
    if (unit == "G") return value << 30;
    if (unit.empty()) return value;
    return std::nullopt;
}

uint64_t last_level_cache_bytes(const std::string& cache_dir) {
    std::error_code error;
    int best_level = 0;
    uint64_t best_bytes = 0;
    for (const auto& entry : std::filesystem::directory_iterator(cache_dir, error)) {
        if (entry.path().filename().string().rfind("index", 0) != 0) continue;
        auto read = [&](const char* name) {
            std::string value;
            std::ifstream(entry.path() / name) >> value;
            return value;
        };
        const std::string type = read("type");
        if (type != "Data" && type != "Unified") continue;
        const std::optional<uint64_t> level_number = parse_cache_size(read("level"));  // a plain number
        const std::optional<uint64_t> bytes = parse_cache_size(read("size"));
        if (!level_number || *level_number > 9 || !bytes) continue;
        const int level = static_cast<int>(*level_number);
        if (level > best_level || (level == best_level && *bytes > best_bytes)) {
            best_level = level;
            best_bytes = *bytes;
        }
    }
    return best_bytes;
}

}  // namespace dqt
