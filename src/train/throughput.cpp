#include "train/throughput.h"

#include <chrono>

#include "core/rng.h"
#include "model/initialization.h"
#include "model/llama.h"
#include "train/memory_estimate.h"
#include "train/options.h"
#include "train/training_step.h"

namespace dqt {

void require_throughput_fits_in_memory(const ThroughputSetup& setup) {
    TrainOptions as_run;  // what the check reads: the model, its method and state, one micro-batch
    as_run.model = setup.model;
    as_run.method = setup.method;
    as_run.optim_state = setup.optim_state;
    as_run.fused_update = setup.fused_update;
    as_run.batch = setup.batch;
    require_training_fits_in_memory(as_run);
}

ThroughputResult measure_training_throughput(const ThroughputSetup& setup) {
    const ModelConfig& config = setup.model;
    config.validate();
    setup.method.validate();
    require_throughput_fits_in_memory(setup);
    ModelParameters model(config, setup.method);
    initialize_parameters(model, 1);
    OptimizerState state(model.layout, setup.optim_state);
    TrainingStep training_step(model, state, AdamWConfig{}, 1.0f, setup.fused_update, 1, 1);
    Activations acts(config, setup.batch, config.seq_len);
    const size_t tokens = static_cast<size_t>(setup.batch) * config.seq_len;
    for (size_t i = 0; i < tokens; ++i) {
        acts.tokens[i] = static_cast<int32_t>(random_u64(7, kStreamBatch, 0, i) % config.vocab_size);
        acts.targets[i] = static_cast<int32_t>(random_u64(7, kStreamBatch, 1, i) % config.vocab_size);
    }
    auto one_step = [&](int step) {
        training_step.run(acts, 1.0f / static_cast<float>(tokens), 1e-4f, step + 1, [](int) {});
    };
    for (int step = 0; step < setup.warmup; ++step) one_step(step);
    const auto start = std::chrono::steady_clock::now();
    for (int step = 0; step < setup.steps; ++step) one_step(setup.warmup + step);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

    ThroughputResult result;
    result.steps = setup.steps;
    result.seconds_per_step = seconds / setup.steps;
    result.tokens_per_second = static_cast<double>(tokens) * setup.steps / seconds;
    result.gflops = result.tokens_per_second * config.train_flops_per_token() / 1e9;
    return result;
}

}  // namespace dqt
