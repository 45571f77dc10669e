#pragma once
// Live progress: one self-overwriting status line on a terminal, plain lines otherwise
// (logs, CI, pipes).
#include <chrono>
#include <cstdio>
#include <string>

namespace dqt {

struct ProgressSnapshot {
    int step = 0;           // steps done
    int total_steps = 0;
    double loss = 0.0;      // nats/token of the latest step
    double tokens_per_second = 0.0;
    double lr = 0.0;
    double seconds_left = 0.0;
};

class ProgressDisplay {
public:
    // interactive: overwrite one line (a terminal); otherwise print every plain_every steps.
    ProgressDisplay(FILE* stream, bool interactive, int plain_every);
    void update(const ProgressSnapshot& snapshot);
    // Prints a full line (e.g. an evaluation result) without garbling the status line.
    void message(const std::string& line);
    void finish();

private:
    FILE* stream_;
    bool interactive_;
    int plain_every_;
    bool status_shown_ = false;
    std::chrono::steady_clock::time_point last_draw_{};
};

std::string format_duration(double seconds);  // "1h02m", "3m05s", "42s"
std::string format_bytes(double bytes);       // "12.3 MiB"

}  // namespace dqt
