#pragma once
// JSON-lines metrics log: one object per logged step, evaluation and report, flushed per line
// so a crashed or interrupted run keeps everything up to its last line.
#include <cstdio>
#include <string>

#include <nlohmann/json_fwd.hpp>

namespace dqt {

class MetricsLog {
public:
    // fresh: start an empty log. Otherwise (resume) keep the lines whose "step" is at most
    // keep_through_step, so the log reads as one uninterrupted run.
    MetricsLog(const std::string& path, bool fresh, int keep_through_step);
    ~MetricsLog();
    MetricsLog(const MetricsLog&) = delete;
    MetricsLog& operator=(const MetricsLog&) = delete;
    void append(const nlohmann::json& record);

private:
    std::string path_;
    FILE* file_ = nullptr;
};

}  // namespace dqt
