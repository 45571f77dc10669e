#include "train/memory_report.h"

#include <cstdio>

#include <nlohmann/json.hpp>

#include "core/memory.h"
#include "train/progress.h"

namespace dqt {

nlohmann::json memory_report_json(int64_t parameter_count) {
    nlohmann::json report;
    report["type"] = "memory";
    report["parameters"] = parameter_count;
    int64_t persistent = 0;
    for (int i = 0; i < kMemCategoryCount; ++i) {
        const auto category = static_cast<MemCategory>(i);
        const int64_t peak = memory_peak_bytes(category);
        report["peak_bytes"][mem_category_name(category)] = peak;
        report["bytes_per_param"][mem_category_name(category)] = static_cast<double>(peak) / parameter_count;
        if (category == MemCategory::weights || category == MemCategory::gradients ||
            category == MemCategory::optimizer) {
            persistent += peak;
        }
    }
    report["persistent_bytes"] = persistent;
    report["persistent_bytes_per_param"] = static_cast<double>(persistent) / parameter_count;
    report["accounted_peak_bytes"] = memory_peak_total_bytes();
    report["peak_rss_bytes"] = peak_rss_bytes();
    return report;
}

std::string memory_report_text(int64_t parameter_count) {
    const nlohmann::json report = memory_report_json(parameter_count);
    std::string text = "memory (peak bytes by category, " + std::to_string(parameter_count) + " parameters):\n";
    char line[160];
    for (int i = 0; i < kMemCategoryCount; ++i) {
        const char* name = mem_category_name(static_cast<MemCategory>(i));
        const double bytes = report["peak_bytes"][name].get<double>();
        std::snprintf(line, sizeof line, "  %-12s %12s  %6.2f bytes/param\n", name, format_bytes(bytes).c_str(),
                      bytes / parameter_count);
        text += line;
    }
    std::snprintf(line, sizeof line, "  %-12s %12s  %6.2f bytes/param (weights + gradients + optimizer)\n",
                  "persistent", format_bytes(report["persistent_bytes"].get<double>()).c_str(),
                  report["persistent_bytes_per_param"].get<double>());
    text += line;
    std::snprintf(line, sizeof line, "  %-12s %12s  (accounted, all categories at once)\n", "peak total",
                  format_bytes(report["accounted_peak_bytes"].get<double>()).c_str());
    text += line;
    std::snprintf(line, sizeof line, "  %-12s %12s  (measured by the OS)\n", "peak RSS",
                  format_bytes(report["peak_rss_bytes"].get<double>()).c_str());
    text += line;
    return text;
}

}  // namespace dqt
