#include "train/metrics_log.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/atomic_file.h"

namespace dqt {

MetricsLog::MetricsLog(const std::string& path, bool fresh, int keep_through_step) : path_(path) {
    std::string kept;
    if (!fresh) {
        std::ifstream existing(path);
        std::string line;
        while (std::getline(existing, line)) {
            const nlohmann::json record = nlohmann::json::parse(line, nullptr, false);
            if (record.is_discarded()) continue;  // a line cut short by a crash
            if (record.value("step", 0) <= keep_through_step) kept += line + "\n";
        }
    }
    write_file_atomic(path, kept);
    file_ = std::fopen(path.c_str(), "a");
    require(file_ != nullptr, "cannot open metrics log " + path + ": " + std::strerror(errno));
}

MetricsLog::~MetricsLog() {
    if (file_) std::fclose(file_);
}

void MetricsLog::append(const nlohmann::json& record) {
    const std::string line = record.dump() + "\n";
    require(std::fwrite(line.data(), 1, line.size(), file_) == line.size() && std::fflush(file_) == 0,
            "cannot write metrics log " + path_ + ": " + std::strerror(errno));
}

}  // namespace dqt
