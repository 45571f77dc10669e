#include "optim/schedule.h"

#include <algorithm>
#include <cmath>

namespace dqt {

float LrSchedule::at(int step) const {
    if (step < warmup_steps) return peak * static_cast<float>(step + 1) / static_cast<float>(warmup_steps);
    const int decay_steps = std::max(1, total_steps - warmup_steps);
    const double progress = std::min(1.0, static_cast<double>(step - warmup_steps) / decay_steps);
    const double cosine = 0.5 * (1.0 + std::cos(M_PI * progress));
    return static_cast<float>(peak * (min_ratio + (1.0 - min_ratio) * cosine));
}

}  // namespace dqt
