#include "train/throughput.h"

#include <chrono>

#include "core/rng.h"
#include "model/llama.h"
#include "optim/optimizer.h"

namespace dqt {

ThroughputResult measure_training_throughput(const ModelConfig& config, const MethodConfig& method,
                                             StateDtype optim_state, int batch, int steps, int warmup) {
    config.validate();
    method.validate();
    ModelParameters model(config, method);
    model.initialize(1);
    OptimizerState adam(model.layout, optim_state);
    GradientBuffer gradients(model.layout);
    Activations acts(config, batch, config.seq_len);
    const size_t tokens = static_cast<size_t>(batch) * config.seq_len;
    for (size_t i = 0; i < tokens; ++i) {
        acts.tokens[i] = static_cast<int32_t>(random_u64(7, kStreamBatch, 0, i) % config.vocab_size);
        acts.targets[i] = static_cast<int32_t>(random_u64(7, kStreamBatch, 1, i) % config.vocab_size);
    }
    const AdamWConfig adam_config;
    auto one_step = [&](int step) {
        gradients.zero();
        model_forward(model, acts, true);
        model_backward(model, acts, 1.0f / static_cast<float>(tokens), gradients);
        const double norm = gradients.global_norm();
        if (norm > 1.0) gradients.scale(static_cast<float>(1.0 / norm));
        optimizer_step(model, gradients, adam, adam_config, 1e-4f, step + 1, 1);
    };
    for (int step = 0; step < warmup; ++step) one_step(step);
    const auto start = std::chrono::steady_clock::now();
    for (int step = 0; step < steps; ++step) one_step(warmup + step);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

    ThroughputResult result;
    result.steps = steps;
    result.seconds_per_step = seconds / steps;
    result.tokens_per_second = static_cast<double>(tokens) * steps / seconds;
    result.gflops = result.tokens_per_second * config.train_flops_per_token() / 1e9;
    return result;
}

}  // namespace dqt
