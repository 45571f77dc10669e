// `dqt bench memory`: training memory of every method on the paper's 130M model. Each case
// runs in a child process of its own, so the OS's peak resident set size is that case's alone.
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <fstream>

#include <nlohmann/json.hpp>

#include "bench_commands.h"
#include "commands.h"
#include "core/error.h"
#include "core/memory.h"
#include "core/parallel.h"
#include "train/memory_report.h"
#include "train/throughput.h"

namespace dqt::cli {

namespace {

struct MemoryCase {
    const char* name;
    const char* description;
    Method method;
    int bits;  // dqt
    StateDtype state;
    bool fused;
    int residual_bits = 0;  // dqt: sub-grid residual (the tuned recipe's ternary runs keep 8)
};

// dqt cases store the embedding and the lm_head as codes too (as the paper's code does), so the
// whole model counts; bitnet keeps its fp32 latents everywhere.
const std::array<MemoryCase, 7> kCases = {{
    {"fp", "fp, fp32 AdamW", Method::fp, 0, StateDtype::fp32, false},
    {"bitnet", "bitnet, fp32 AdamW", Method::bitnet, 0, StateDtype::fp32, false},
    {"dqt-8", "dqt 8-bit, fp32 AdamW", Method::dqt, 8, StateDtype::fp32, false},
    {"dqt-1.58", "dqt ternary, fp32 AdamW", Method::dqt, 1, StateDtype::fp32, false},
    {"dqt-1.58-state8", "dqt ternary, 8-bit AdamW state", Method::dqt, 1, StateDtype::q8, false},
    {"dqt-1.58-state8-fused", "dqt ternary, 8-bit state, fused updates", Method::dqt, 1, StateDtype::q8, true},
    {"dqt-1.58-state8-fused-residual8", "dqt ternary, 8-bit state, fused updates, 8-bit residual", Method::dqt, 1,
     StateDtype::q8, true, 8},
}};

// The paper's 130M configuration (hidden 768, 12 layers, 12 heads, FFN 2048, seq 512, vocab 32002).
ModelConfig paper_130m() {
    ModelConfig c;
    c.dim = 768;
    c.n_layers = 12;
    c.n_heads = 12;
    c.n_kv_heads = 12;
    c.ffn_dim = 2048;
    c.seq_len = 512;
    c.vocab_size = 32002;
    c.tie_embeddings = false;
    return c;
}

struct MemoryArgs {
    ModelConfig model_flags = paper_130m();
    std::string config_path;
    std::string case_name;  // set: run this case here; empty: every case in a child process
    int batch = 1;
    int steps = 2;
    int threads = 0;
    bool json = false;
};

const MemoryCase& find_case(const std::string& name) {
    for (const MemoryCase& c : kCases) {
        if (name == c.name) return c;
    }
    std::string known;
    for (const MemoryCase& c : kCases) known += std::string(known.empty() ? "" : ", ") + c.name;
    throw Error("unknown memory case '" + name + "': use one of " + known);
}

ThroughputSetup case_setup(const MemoryCase& c, const ModelConfig& config, const MemoryArgs& args) {
    ThroughputSetup setup;
    setup.model = config;
    setup.method.kind = c.method;
    if (c.method == Method::dqt) {
        setup.method.grid = CodeGrid{c.bits};
        setup.method.quantize_embedding = true;
        setup.method.quantize_head = true;
        setup.method.residual_bits = c.residual_bits;
    }
    setup.optim_state = c.state;
    setup.fused_update = c.fused;
    setup.batch = args.batch;
    setup.steps = args.steps;
    setup.warmup = 1;
    return setup;
}

nlohmann::json run_case(const MemoryCase& c, const ModelConfig& config, const MemoryArgs& args) {
    const ThroughputResult result = measure_training_throughput(case_setup(c, config, args));
    nlohmann::json record = memory_report_json(config.parameter_count());
    record["case"] = c.name;
    record["description"] = c.description;
    record["tokens_per_second"] = result.tokens_per_second;
    record["batch"] = args.batch;
    record["seq_len"] = config.seq_len;
    record["threads"] = num_threads();
    return record;
}

// Runs `dqt bench memory --case NAME` in a child process and returns its JSON line.
nlohmann::json run_child(const MemoryCase& c, const std::string& config_file, const MemoryArgs& args) {
    const std::string command = "/proc/" + std::to_string(getpid()) + "/exe bench memory --json --case " + c.name +
                                " --config " + config_file + " --batch " + std::to_string(args.batch) +
                                " --steps " + std::to_string(args.steps) + " --threads " +
                                std::to_string(num_threads());
    FILE* pipe = popen(command.c_str(), "r");
    require(pipe != nullptr, "bench memory: cannot start a child process for case " + std::string(c.name));
    std::string output;
    std::array<char, 4096> chunk;
    size_t got;
    while ((got = std::fread(chunk.data(), 1, chunk.size(), pipe)) > 0) output.append(chunk.data(), got);
    const int status = pclose(pipe);
    const std::string how = WIFEXITED(status) ? "exit code " + std::to_string(WEXITSTATUS(status))
                            : WIFSIGNALED(status) ? "killed by signal " + std::to_string(WTERMSIG(status))
                                                  : "wait status " + std::to_string(status);
    require(status == 0, "bench memory: case " + std::string(c.name) + " failed (" + how + ")");
    try {
        return nlohmann::json::parse(output);
    } catch (const nlohmann::json::exception&) {
        throw Error("bench memory: case " + std::string(c.name) + " printed no JSON result");
    }
}

void print_table(const std::vector<nlohmann::json>& records, int64_t parameters) {
    double bitnet_rss = 0.0;
    for (const auto& r : records) {
        if (r["case"] == "bitnet") bitnet_rss = r["peak_rss_bytes"].get<double>();
    }
    std::printf("%lld parameters; bytes per parameter at their peak, by category\n\n",
                static_cast<long long>(parameters));
    std::printf("| case | weights | gradients | optimizer | persistent | activations + scratch | peak RSS | RSS vs "
                "bitnet | tokens/s |\n|---|---|---|---|---|---|---|---|---|\n");
    for (const auto& r : records) {
        const auto& per = r["bytes_per_param"];
        const double rss = r["peak_rss_bytes"].get<double>();
        const double transient = r["peak_bytes"]["activations"].get<double>() + r["peak_bytes"]["scratch"].get<double>();
        std::printf("| %s | %.3f | %.3f | %.3f | **%.3f** | %.0f MiB | %.0f MiB | %s | %.0f |\n",
                    r["description"].get<std::string>().c_str(), per["weights"].get<double>(),
                    per["gradients"].get<double>(), per["optimizer"].get<double>(),
                    r["persistent_bytes_per_param"].get<double>(), transient / (1 << 20), rss / (1 << 20),
                    bitnet_rss > 0 ? (std::to_string(static_cast<int>(100.0 * rss / bitnet_rss + 0.5)) + "%").c_str()
                                   : "",
                    r["tokens_per_second"].get<double>());
    }
}

}  // namespace

void add_bench_memory_command(CLI::App& bench) {
    auto args = std::make_shared<MemoryArgs>();
    CLI::App* command = bench.add_subcommand(
        "memory", "training memory of every method on the paper's 130M model (each case in its own process)");
    add_model_flags(*command, args->model_flags, args->config_path);
    command->add_option("--case", args->case_name, "run only this case, in this process");
    command->add_option("--batch", args->batch, "sequences per step")->check(positive_whole_number())->capture_default_str();
    command->add_option("--steps", args->steps, "timed steps (after one untimed)")
        ->check(positive_whole_number())
        ->capture_default_str();
    add_threads_flag(*command, args->threads);
    command->add_flag("--json", args->json, "JSON lines instead of a table");
    command->callback([command, args] {
        set_num_threads(args->threads);
        const ModelConfig config = resolve_model_config(*command, args->model_flags, args->config_path, paper_130m());
        config.validate();
        if (!args->case_name.empty()) {
            const nlohmann::json record = run_case(find_case(args->case_name), config, *args);
            std::printf("%s\n", record.dump().c_str());
            return;
        }
        // Every case is checked before the first child starts (one error line, not a child's and ours).
        for (const MemoryCase& c : kCases) require_throughput_fits_in_memory(case_setup(c, config, *args));
        // The children read the resolved model from a temporary config file.
        char path[] = "/tmp/dqt-bench-memory-XXXXXX";
        const int fd = mkstemp(path);
        require(fd >= 0, "bench memory: cannot create a temporary file in /tmp");
        close(fd);
        const std::string config_file = path;
        std::ofstream(config_file) << nlohmann::json(config).dump();
        std::vector<nlohmann::json> records;
        try {
            for (const MemoryCase& c : kCases) {
                if (!args->json) std::fprintf(stderr, "bench memory: %s ...\n", c.description);
                records.push_back(run_child(c, config_file, *args));
                if (args->json) std::printf("%s\n", records.back().dump().c_str());
            }
        } catch (...) {
            std::remove(config_file.c_str());
            throw;
        }
        std::remove(config_file.c_str());
        if (!args->json) print_table(records, config.parameter_count());
    });
}

}  // namespace dqt::cli
