#pragma once
// Memory accounting report: bytes per allocator category (live and peak), bytes per
// parameter, and the OS's peak resident set size.
#include <cstdint>
#include <string>

#include <nlohmann/json_fwd.hpp>

namespace dqt {

nlohmann::json memory_report_json(int64_t parameter_count);
std::string memory_report_text(int64_t parameter_count);

}  // namespace dqt
