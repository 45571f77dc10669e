#pragma once
// Training-step throughput on random tokens (no dataset needed): the core of `dqt bench
// train` and `dqt bench memory`. The memory ledger's peaks afterwards are the run's.
#include "model/config.h"
#include "model/method.h"
#include "optim/optimizer_state.h"

namespace dqt {

struct ThroughputSetup {
    ModelConfig model;
    MethodConfig method;
    StateDtype optim_state = StateDtype::fp32;
    bool fused_update = false;
    int batch = 8;
    int steps = 20;   // timed
    int warmup = 3;   // untimed, first
};

struct ThroughputResult {
    double tokens_per_second = 0.0;
    double seconds_per_step = 0.0;
    double gflops = 0.0;  // achieved, from ModelConfig::train_flops_per_token
    int steps = 0;
};

// Times full optimizer steps (forward, backward, clipping at norm 1, update), after
// require_throughput_fits_in_memory.
ThroughputResult measure_training_throughput(const ThroughputSetup& setup);

// The one-line error of `dqt train` (train/memory_estimate.h) when the setup cannot fit in this
// machine's memory.
void require_throughput_fits_in_memory(const ThroughputSetup& setup);

}  // namespace dqt
