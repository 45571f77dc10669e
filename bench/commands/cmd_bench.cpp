#include <cstdio>

#include <nlohmann/json.hpp>

#include "bench_commands.h"
#include "commands.h"
#include "core/error.h"
#include "core/parallel.h"
#include "kernels/gemm.h"
#include "train/throughput.h"

namespace dqt::cli {

namespace {
// The shape every `bench train` figure in docs/ was measured on (the model defaults before
// 2026-11-26): FFN 688, a separate lm_head.
ModelConfig reference_config() {
    ModelConfig c;
    c.ffn_dim = 688;
    c.tie_embeddings = false;
    return c;
}

struct BenchTrainArgs {
    ModelConfig model_flags = reference_config();
    MethodFlags method_flags;
    std::string config_path;
    int batch = 8;
    int steps = 20;
    int warmup = 3;
    int threads = 0;
    bool fused_update = false;
    bool json = false;
};

void add_bench_train_command(CLI::App& bench) {
    auto args = std::make_shared<BenchTrainArgs>();
    CLI::App* train = bench.add_subcommand(
        "train", "training throughput of the reference config (dim 256, 4 layers, 4 heads, FFN 688, untied head, seq 256, "
                  "batch 8)");
    add_model_flags(*train, args->model_flags, args->config_path);
    add_method_flags(*train, args->method_flags);
    train->add_option("--batch", args->batch, "sequences per step")->check(positive_whole_number())->capture_default_str();
    train->add_option("--steps", args->steps, "timed steps")->check(positive_whole_number())->capture_default_str();
    train->add_option("--warmup", args->warmup, "untimed steps first")->check(non_negative_whole_number())->capture_default_str();
    train->add_flag("--fused-update", args->fused_update, "update each weight inside the backward pass");
    add_threads_flag(*train, args->threads);
    train->add_flag("--json", args->json, "print one JSON object");
    train->callback([train, args] {
        set_num_threads(args->threads);
        const ModelConfig config = resolve_model_config(*train, args->model_flags, args->config_path, reference_config());
        const MethodConfig method = resolve_method_config(*train, args->method_flags);
        const StateDtype optim_state = resolve_optim_state(args->method_flags);
        const ThroughputResult result = measure_training_throughput(
            {config, method, optim_state, args->fused_update, args->batch, args->steps, args->warmup});
        const double peak = measure_gemm_peak_gflops(num_threads());
        const nlohmann::json record = {{"bench", "train"},
                                       {"threads", num_threads()},
                                       {"method", method.label()},
                                       {"optim_state", state_dtype_bits(optim_state)},
                                       {"compute_dtype", compute_dtype_name(method.compute)},
                                       {"fused_update", args->fused_update},
                                       {"parameters", config.parameter_count()},
                                       {"batch", args->batch},
                                       {"seq_len", config.seq_len},
                                       {"steps", result.steps},
                                       {"tokens_per_second", result.tokens_per_second},
                                       {"seconds_per_step", result.seconds_per_step},
                                       {"gflops", result.gflops},
                                       {"gemm_peak_gflops", peak},
                                       {"fraction_of_gemm_peak", result.gflops / peak}};
        if (args->json) {
            std::printf("%s\n", record.dump().c_str());
            return;
        }
        std::printf("bench train: %s, %lld parameters, batch %d x %d tokens, %d threads, %d timed steps\n",
                    method.label().c_str(), static_cast<long long>(config.parameter_count()), args->batch,
                    config.seq_len, num_threads(), result.steps);
        std::printf("  %.0f tokens/s, %.1f ms/step\n", result.tokens_per_second, 1e3 * result.seconds_per_step);
        std::printf("  %.1f GFLOP/s achieved, GEMM peak %.1f GFLOP/s measured here: %.0f%% of peak\n", result.gflops,
                    peak, 100.0 * result.gflops / peak);
    });
}

}  // namespace

void add_bench_command(CLI::App& app) {
    CLI::App* bench = app.add_subcommand("bench", "benchmarks (not tests): train, memory, generate, serve, bandwidth");
    bench->require_subcommand(1);
    add_bench_train_command(*bench);
    add_bench_memory_command(*bench);
    add_bench_generate_command(*bench);
    add_bench_serve_command(*bench);
    add_bench_bandwidth_command(*bench);
}

}  // namespace dqt::cli
