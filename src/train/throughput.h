#pragma once
// Training-step throughput on random tokens (no dataset needed): the `dqt bench train` core.
#include "model/config.h"
#include "model/method.h"
#include "optim/optimizer_state.h"

namespace dqt {

struct ThroughputResult {
    double tokens_per_second = 0.0;
    double seconds_per_step = 0.0;
    double gflops = 0.0;  // achieved, from ModelConfig::train_flops_per_token
    int steps = 0;
};

// Times `steps` full optimizer steps (forward, backward, clip norm, update) of the given
// method after `warmup` untimed ones.
ThroughputResult measure_training_throughput(const ModelConfig& config, const MethodConfig& method,
                                             StateDtype optim_state, int batch, int steps, int warmup);

}  // namespace dqt
