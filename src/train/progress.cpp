#include "train/progress.h"

#include <cmath>

namespace dqt {

std::string format_duration(double seconds) {
    if (!std::isfinite(seconds) || seconds < 0) return "?";
    const long total = std::lround(seconds);
    char text[32];
    if (total >= 3600) {
        std::snprintf(text, sizeof text, "%ldh%02ldm", total / 3600, (total % 3600) / 60);
    } else if (total >= 60) {
        std::snprintf(text, sizeof text, "%ldm%02lds", total / 60, total % 60);
    } else {
        std::snprintf(text, sizeof text, "%lds", total);
    }
    return text;
}

std::string format_bytes(double bytes) {
    const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int unit = 0;
    while (std::fabs(bytes) >= 1024.0 && unit < 4) {
        bytes /= 1024.0;
        ++unit;
    }
    char text[32];
    std::snprintf(text, sizeof text, unit == 0 ? "%.0f %s" : "%.1f %s", bytes, units[unit]);
    return text;
}

ProgressDisplay::ProgressDisplay(FILE* stream, bool interactive, int plain_every)
    : stream_(stream), interactive_(interactive), plain_every_(plain_every > 0 ? plain_every : 1) {}

void ProgressDisplay::update(const ProgressSnapshot& s) {
    const bool last = s.step == s.total_steps;
    char line[256];
    std::snprintf(line, sizeof line, "step %*d/%d | loss %.4f | %.0f tok/s | lr %.2e | ETA %s",
                  static_cast<int>(std::to_string(s.total_steps).size()), s.step, s.total_steps, s.loss,
                  s.tokens_per_second, s.lr, format_duration(s.seconds_left).c_str());
    if (interactive_) {
        // Redraw at most 10 times a second: a terminal is slower than a small model's step.
        const auto now = std::chrono::steady_clock::now();
        if (!last && status_shown_ && now - last_draw_ < std::chrono::milliseconds(100)) return;
        last_draw_ = now;
        const int percent = s.total_steps > 0 ? 100 * s.step / s.total_steps : 100;
        std::fprintf(stream_, "\r\033[K[%3d%%] %s", percent, line);
        status_shown_ = true;
    } else if (s.step % plain_every_ == 0 || last) {
        std::fprintf(stream_, "%s\n", line);
    }
    std::fflush(stream_);
}

void ProgressDisplay::message(const std::string& line) {
    if (interactive_ && status_shown_) std::fprintf(stream_, "\r\033[K");
    std::fprintf(stream_, "%s\n", line.c_str());
    status_shown_ = false;
    std::fflush(stream_);
}

void ProgressDisplay::finish() {
    if (interactive_ && status_shown_) std::fprintf(stream_, "\n");
    status_shown_ = false;
    std::fflush(stream_);
}

}  // namespace dqt
