#pragma once
// Learning-rate schedule: linear warm-up from 0 to peak, then cosine decay to
// peak * min_ratio at total_steps.
namespace dqt {

struct LrSchedule {
    float peak = 1e-3f;
    int warmup_steps = 0;
    int total_steps = 1;
    float min_ratio = 0.1f;
    // step counts from 0; returns the rate used by the update of that step.
    float at(int step) const;
};

}  // namespace dqt
