// `dqt bench serve`: what continuous batching gains. The server's engine (serve/engine.h) runs
// S streams at once, every live sequence's next token in one batch that reads the weights
// once; this times S = 1, 2, 4, ... streams of greedy decoding on one model, in this process
// (no HTTP), each S on one engine of S slots, and reports the aggregate and per-stream decode rate. The prompt's share is
// measured on its own (each stream's prompt plus one token) and taken out, so the figures are
// decode steps only.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench_commands.h"
#include "cache_regime.h"
#include "commands.h"
#include "model/initialization.h"
#include "model_files.h"
#include "core/cpu_cache.h"
#include "core/error.h"
#include "core/float16.h"
#include "core/parallel.h"
#include "data/tokenizer.h"
#include "infer/inference_model.h"
#include "infer/ternary_layout.h"
#include "serve/engine.h"

namespace dqt::cli {

namespace {

struct BenchServeArgs {
    std::string model_path;  // a checkpoint or GGUF; empty: a random model of the flags' shape
    ModelConfig model_flags;
    std::string config_path;
    std::string bits = "1.58";
    std::string preset = "154m";
    std::string float_type = "f32";  // of the random model's fp matrices (embedding, head)
    std::vector<int> streams = {1, 2, 4, 8};
    int prompt_tokens = 16;
    int decode_tokens = 64;
    int repeats = 2;
    int threads = 1;
    std::string kv_cache = "f32";
    std::string ternary_layout = "auto";
    bool json = false;
};

// Seconds for `streams` requests of `max_tokens` each, submitted to `engine` together, to all end.
double time_requests(Engine& engine, const InferenceModel& model, int streams, int prompt_tokens, int max_tokens) {
    std::vector<GenerationRequest> requests(static_cast<size_t>(streams));
    for (int s = 0; s < streams; ++s) {
        GenerationRequest& r = requests[static_cast<size_t>(s)];
        for (int i = 0; i < prompt_tokens; ++i)
            r.prompt.push_back(static_cast<int32_t>((i * 131 + s * 17 + 7) % model.config.vocab_size));
        r.max_tokens = max_tokens;
        r.sampling.temperature = 0.0f;
    }
    const auto start = std::chrono::steady_clock::now();
    std::vector<std::shared_ptr<RequestStream>> running;
    for (GenerationRequest& r : requests) running.push_back(engine.submit(std::move(r)));
    for (const auto& stream : running) {
        require(stream != nullptr, "bench serve: the engine refused a stream");
        StreamUpdate update;
        while (!(stream->next(update, std::chrono::milliseconds(1000)) && update.done)) {
        }
        require(update.error.empty(), "bench serve: " + update.error);
    }
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

void add_bench_serve_command(CLI::App& bench) {
    auto args = std::make_shared<BenchServeArgs>();
    args->model_flags = bench_model_config("154m");
    CLI::App* command = bench.add_subcommand(
        "serve", "decode tokens/s of dqt serve's engine with 1, 2, 4, ... streams batched (default: a random 154M ternary model)");
    command->add_option("model", args->model_path, "a checkpoint or GGUF file (default: a random model)");
    add_model_flags(*command, args->model_flags, args->config_path);
    command->add_option("--bits", args->bits, "code width of the random default model: 1.58 (ternary) or 2..8")
        ->capture_default_str();
    command->add_option("--streams", args->streams, "stream counts to time, each 1 to 1024 (dqt serve's --parallel)")
        ->delimiter(',')
        ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll)
        ->check(CLI::Range(1, 1024));
    command->add_option("--prompt-tokens", args->prompt_tokens, "prompt length of each stream")
        ->check(positive_whole_number())
        ->capture_default_str();
    command->add_option("--decode-tokens", args->decode_tokens, "tokens each stream generates")
        ->check(CLI::Range(2, 1 << 20))
        ->capture_default_str();
    command->add_option("--repeats", args->repeats, "best of this many runs")->check(positive_whole_number())->capture_default_str();
    command->add_option("--threads", args->threads, "compute threads")->check(positive_whole_number())->capture_default_str();
    add_kv_cache_flag(*command, args->kv_cache);
    add_ternary_layout_flag(*command, args->ternary_layout);
    add_bench_preset_flag(*command, args->preset);
    command->add_option("--float-type", args->float_type,
                        "the random model's fp matrices (its embedding and head): f32, or f16 (rounded to fp16, as an "
                        "F16 GGUF such as BitNet b1.58 2B4T's gives them; inference then holds them in fp16)")
        ->check(CLI::IsMember({"f32", "f16"}))
        ->capture_default_str();
    command->add_flag("--json", args->json, "print one JSON object");
    command->callback([command, args] {
        set_num_threads(args->threads);
        const KvCacheType cache_type = parse_kv_cache_type(args->kv_cache);
        require(args->model_path.empty() || command->count("--float-type") == 0,
                "--float-type sets the random model's fp matrices; a model file given has its own");
        std::unique_ptr<ModelParameters> parameters;
        std::unique_ptr<Tokenizer> tokenizer;
        if (args->model_path.empty()) {
            MethodConfig method;
            method.kind = Method::dqt;
            method.grid = parse_code_grid(args->bits);
            parameters = std::make_unique<ModelParameters>(
                resolve_model_config(*command, args->model_flags, args->config_path, bench_model_config(args->preset)),
                method);
            initialize_parameters(*parameters, 1);
            if (args->float_type == "f16")
                for (float& value : parameters->values) value = static_cast<float>(static_cast<Float16>(value));
            tokenizer = bench_tokenizer(parameters->config);
        } else {
            ModelFile loaded = load_model_file(args->model_path);
            parameters = std::move(loaded.model);
            tokenizer = std::move(loaded.tokenizer);
        }
        InferenceModel model(*parameters);
        parameters.reset();
        // The layout dqt serve would hold with --parallel at the largest stream count: auto times
        // one row and that many, as serve does at load.
        const int most_streams = *std::max_element(args->streams.begin(), args->streams.end());
        const std::vector<TernaryLayoutTiming> layout_timing =
            hold_ternary_layout(model, parse_ternary_layout(args->ternary_layout), {1, most_streams}, cache_type);
        require(args->prompt_tokens + args->decode_tokens <= model.config.seq_len,
                "--prompt-tokens + --decode-tokens exceed the model's context of " + std::to_string(model.config.seq_len));

        const uint64_t cache_bytes = last_level_cache_bytes();
        const size_t weight_bytes = model.weight_bytes_per_token();
        ReadBandwidth beyond_cache(cache_bytes);
        for (int pass = 0; pass < 5; ++pass) beyond_cache.measure_pass();
        double read_rate_at_step_size = 0.0;
        const bool cached = CacheRegime{cache_bytes, beyond_cache.bytes_per_second()}.holds(
            static_cast<double>(weight_bytes), &read_rate_at_step_size);
        nlohmann::json record = {{"bench", "serve"},
                                 {"threads", args->threads},
                                 {"parameters", model.config.parameter_count()},
                                 {"method", model.method_label},
                                 {"kernels", model.kernels_label()},
                                 {"weight_bytes_per_step", weight_bytes},
                                 {"last_level_cache_bytes", cache_bytes},
                                 {"regime", cached ? "cache-resident" : "memory"},
                                 {"read_gb_per_s", beyond_cache.bytes_per_second() / 1e9},
                                 {"kv_cache", args->kv_cache},
                                 {"kv_bytes_per_position", kv_bytes_per_position(model.config, cache_type)},
                                 {"ternary_layout", args->ternary_layout},
                                 {"prompt_tokens", args->prompt_tokens},
                                 {"decode_tokens", args->decode_tokens},
                                 {"runs", nlohmann::json::array()}};
        for (const TernaryLayoutTiming& timing : layout_timing)  // what auto measured at load
            record["layout_decode_step_seconds"].push_back(
                {{"rows", timing.rows}, {"2bit", timing.two_bit_seconds}, {"lookup", timing.lookup_seconds}});
        if (cache_bytes == 0) record["read_gb_per_s_at_step_size"] = read_rate_at_step_size / 1e9;  // how it was told
        double single_stream = 0;
        for (const int streams : args->streams) {
            // One engine for all runs of a stream count, as `dqt serve --parallel S` keeps one for
            // its life. Built, and run once, before the clock starts: building it computes each
            // slot's tables on this thread, whose OpenMP workers then spin for a while, and its
            // first steps start its own thread team.
            Engine engine(model, *tokenizer,
                          EngineOptions{streams, 0, args->prompt_tokens + args->decode_tokens, cache_type});
            time_requests(engine, model, streams, args->prompt_tokens, 1);
            double best = 0;
            for (int r = 0; r < args->repeats; ++r) {
                // Prompts plus one sampled token, then the whole run: the difference is the
                // decode steps of tokens 2 .. decode_tokens.
                const double prompt_only = time_requests(engine, model, streams, args->prompt_tokens, 1);
                const double whole = time_requests(engine, model, streams, args->prompt_tokens, args->decode_tokens);
                // The two runs are timed apart, so the prompt run's noise lands on the decode time:
                // a run whose decode steps are not most of it would report that noise, so it is
                // dropped.
                const double decode_seconds = whole - prompt_only;
                if (decode_seconds < 0.5 * whole) continue;
                best = std::max(best, streams * (args->decode_tokens - 1) / decode_seconds);
            }
            require(best > 0, "bench serve: with " + std::to_string(streams) +
                                  " stream(s) the decode steps were under half of every run, too little to time "
                                  "apart from the prompts; raise --decode-tokens");
            if (streams == 1) single_stream = best;
            nlohmann::json run = {{"streams", streams},
                                  {"decode_tokens_per_second", best},
                                  {"per_stream_tokens_per_second", best / streams}};
            if (single_stream > 0) run["speedup_over_one_stream"] = best / single_stream;
            record["runs"].push_back(run);
        }
        if (args->json) {
            std::printf("%s\n", record.dump().c_str());
            return;
        }
        const std::string cache = cache_bytes > 0 ? "last-level cache " + std::to_string(cache_bytes >> 20) + " MiB"
                                                  : "cache size unreadable: told by reading that many bytes back";
        std::printf("bench serve: %s, %.0fM parameters, %.1f MB of weights a step (%s; %s), %d thread(s), %s KV cache\n",
                    model.method_label.c_str(), model.config.parameter_count() / 1e6, weight_bytes / 1e6,
                    record["regime"].get<std::string>().c_str(), cache.c_str(), args->threads, args->kv_cache.c_str());
        std::printf("kernels: %s (--ternary-layout %s)\n", model.kernels_label().c_str(), args->ternary_layout.c_str());
        if (!layout_timing.empty()) std::printf("%s\n", describe_layout_timings(layout_timing).c_str());
        std::printf("%8s %14s %18s %10s\n", "streams", "decode tok/s", "per stream tok/s", "speedup");
        for (const nlohmann::json& run : record["runs"]) {
            std::printf("%8d %14.1f %18.1f %10s\n", run["streams"].get<int>(), run["decode_tokens_per_second"].get<double>(),
                        run["per_stream_tokens_per_second"].get<double>(),
                        run.contains("speedup_over_one_stream")
                            ? (std::to_string(run["speedup_over_one_stream"].get<double>()).substr(0, 4) + "x").c_str()
                            : "-");
        }
    });
}

}  // namespace dqt::cli
