// `dqt bench generate`: prompt and decode speed of dqt's inference engine (infer/) against
// llama.cpp on the same exported model (TQ2_0 for ternary, Q8_0 for 8-bit) and thread count,
// and decode speed against the memory-bandwidth bound: the bytes a decoded token reads (weights
// and the KV cache) over the read bandwidth measured in this process, over a buffer several
// times the last-level cache. Where those bytes fit in the last-level cache (its size read from
// sysfs, or where sysfs lacks it, told by the rate at which data of that size reads back),
// decode runs from the cache: the bench says so and gives no fraction of the memory bound.
#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench_commands.h"
#include "cache_regime.h"
#include "commands.h"
#include "core/cpu_cache.h"
#include "core/error.h"
#include "core/parallel.h"
#include "data/synthetic_bpe.h"
#include "export/gguf_model.h"
#include "io/gguf.h"
#include "infer/ternary_layout.h"
#include "infer/inference_model.h"
#include "infer/sampling.h"
#include "infer/session.h"
#include "kernels/read_bandwidth.h"
#include "model/initialization.h"
#include "quant/codes.h"

namespace dqt::cli {

namespace {

struct BenchGenerateArgs {
    std::string model_path;  // a GGUF from `dqt export`; empty: a random ternary model of the flags' shape
    ModelConfig model_flags;
    std::string config_path;
    std::string bits = "1.58";  // of the random default model
    std::string preset = "154m";  // its shape (bench_model_config)
    std::string keep_dir;         // where its GGUF file is kept; empty: a temporary folder
    std::string kv_cache = "f32";
    std::string ternary_layout = "auto";
    std::string float_type = "f32";  // GGUF type of the random model's fp matrices (embedding, head)
    int prompt_tokens = 128;
    int decode_tokens = 64;
    int repeats = 3;
    int threads = 1;
    bool skip_llamacpp = false;
    std::string llamacpp_script;
    bool json = false;
};

double seconds_since(std::chrono::steady_clock::time_point start) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// llama.cpp reads every tensor of the file once per token (token_embd as the head).
double gguf_weight_bytes_per_token(const std::string& path) {
    const GgufReader reader(path);
    double bytes = 0.0;
    for (const auto& tensor : reader.tensors()) bytes += static_cast<double>(tensor.bytes);
    return bytes;
}

struct Speeds {
    double prompt_tokens_per_second = 0.0;
    double decode_tokens_per_second = 0.0;
};

// Mean bytes of K and V a decoded token reads: the token at position p reads positions 0..p of
// every layer, and the decode runs positions prompt .. prompt + decode - 1.
double kv_bytes_per_decoded_token(const ModelConfig& c, int prompt_tokens, int decode_tokens, KvCacheType type) {
    const double mean_positions_read = prompt_tokens + (decode_tokens + 1) / 2.0;
    return kv_bytes_per_position(c, type) * mean_positions_read;
}

// An engine's decode against the bound: the bytes a token reads, the rate it reads them at, and,
// unless they fit in the last-level cache, that rate as a fraction of the measured bandwidth.
nlohmann::json decode_against_bound(double decode_tokens_per_second, double weight_bytes, double kv_bytes,
                                    double bandwidth, const CacheRegime& regime) {
    const double bytes = weight_bytes + kv_bytes;
    double measured_rate = 0.0;
    const bool cached = regime.holds(bytes, &measured_rate);
    nlohmann::json record = {{"weight_bytes_per_token", weight_bytes},
            {"kv_bytes_per_token", kv_bytes},
            {"decode_read_gb_per_s", decode_tokens_per_second * bytes / 1e9},
            {"regime", cached ? "cache-resident" : "memory"},
            {"decode_fraction_of_bandwidth_bound",
             cached ? nlohmann::json(nullptr) : nlohmann::json(decode_tokens_per_second * bytes / bandwidth)}};
    if (regime.cache_bytes == 0) record["read_gb_per_s_at_token_size"] = measured_rate / 1e9;  // how the regime was told
    return record;
}

Speeds measure_dqt(const InferenceModel& model, const std::vector<int32_t>& prompt, int decode_tokens, int repeats,
                   KvCacheType cache_type, ReadBandwidth& bandwidth) {
    double best_prompt = std::numeric_limits<double>::infinity(), best_decode = best_prompt;
    InferenceSession session(model, static_cast<int>(prompt.size()) + decode_tokens, cache_type);
    for (int r = 0; r < repeats; ++r) {
        bandwidth.measure_pass();
        session.reset();
        auto start = std::chrono::steady_clock::now();
        const float* logits = session.run(prompt.data(), static_cast<int>(prompt.size()), LogitRows::last);
        best_prompt = std::min(best_prompt, seconds_since(start));
        start = std::chrono::steady_clock::now();
        for (int i = 0; i < decode_tokens; ++i) {
            const int32_t next = sample_token(logits, model.config.vocab_size, SamplingOptions{0.0f}, 0.0f);
            logits = session.run(&next, 1, LogitRows::last);
        }
        best_decode = std::min(best_decode, seconds_since(start));
    }
    return {static_cast<double>(prompt.size()) / best_prompt, decode_tokens / best_decode};
}

std::string default_llamacpp_script() {
    // build/dqt -> tools/llamacpp/interop.mjs in the same checkout.
    const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe");
    return (exe.parent_path().parent_path() / "tools" / "llamacpp" / "interop.mjs").string();
}

Speeds measure_llamacpp(const std::string& script, const std::string& gguf, const std::vector<int32_t>& prompt,
                        const BenchGenerateArgs& args, const std::string& folder) {
    require(std::filesystem::exists(script), "llama.cpp runner " + script + " not found: pass --llama-cpp-script");
    require(std::filesystem::exists(std::filesystem::path(script).parent_path() / "node_modules" / "node-llama-cpp"),
            "llama.cpp is not installed: run scripts/setup.sh (or --no-llama-cpp)");
    const nlohmann::json request = {
        {"model", gguf},
        {"threads", args.threads},
        {"context", static_cast<int>(prompt.size()) + args.decode_tokens + 1},
        {"kv_cache", args.kv_cache == "f16" ? "F16" : "F32"},
        {"bench", {{"prompt_tokens", prompt}, {"decode_tokens", args.decode_tokens}, {"repeats", args.repeats}}}};
    const std::string request_path = folder + "/request.json";
    std::ofstream(request_path) << request.dump();
    FILE* pipe = popen(("node " + script + " " + request_path).c_str(), "r");
    require(pipe != nullptr, "cannot start node for llama.cpp");
    std::string output;
    char chunk[4096];
    size_t got;
    while ((got = std::fread(chunk, 1, sizeof chunk, pipe)) > 0) output.append(chunk, got);
    require(pclose(pipe) == 0, "llama.cpp run failed (see its messages above)");
    const nlohmann::json response = nlohmann::json::parse(output, nullptr, false);
    require(!response.is_discarded() && response.contains("bench"), "llama.cpp's runner gave no benchmark result");
    return {response["bench"]["prompt_tokens_per_second"].get<double>(),
            response["bench"]["decode_tokens_per_second"].get<double>()};
}

}  // namespace

ModelConfig bench_model_config(const std::string& preset) {
    ModelConfig c;
    c.vocab_size = 256;
    c.seq_len = 512;
    c.tie_embeddings = true;
    if (preset == "154m") {
        // 154M parameters (dim 1024, 12 layers, FFN 2816; every row a multiple of 256, so
        // every block linear is TQ2_0), byte vocabulary, tied embeddings.
        c.dim = 1024;
        c.n_layers = 12;
        c.n_heads = 16;
        c.n_kv_heads = 16;
        c.ffn_dim = 2816;
        return c;
    }
    if (preset == "2b") {
        // BitNet b1.58 2B4T's shape: its blocks (2.09B parameters, 525 MB of 2-bit codes) and its
        // 128,256-entry vocabulary (a synthetic one: data/synthetic_bpe.h), tied; SwiGLU in place
        // of its ReLU^2, which export to llama.cpp does not carry.
        c.vocab_size = 128256;
        c.dim = 2560;
        c.n_layers = 30;
        c.n_heads = 20;
        c.n_kv_heads = 5;
        c.ffn_dim = 6912;
        return c;
    }
    throw Error("unknown --preset " + quote_untrusted(preset, 20) + ": use 154m or 2b");
}

std::unique_ptr<Tokenizer> bench_tokenizer(const ModelConfig& config) {
    return config.vocab_size == 256 ? make_byte_tokenizer() : make_synthetic_byte_level_bpe(config.vocab_size);
}

void add_bench_preset_flag(CLI::App& command, std::string& preset) {
    command.add_option("--preset", preset,
                       "shape of the random model: 154m (byte vocabulary), or 2b (BitNet b1.58 2B4T's: dim 2560, 30 "
                       "layers, 20 heads, 5 kv heads, FFN 6912, vocabulary 128,256); --dim and the other shape flags "
                       "override it; a --vocab-size other than 256 exports a synthetic byte-level BPE vocabulary")
        ->capture_default_str();
}

void add_bench_generate_command(CLI::App& bench) {
    auto args = std::make_shared<BenchGenerateArgs>();
    args->model_flags = bench_model_config("154m");
    CLI::App* command = bench.add_subcommand(
        "generate", "prompt and decode tokens/s of dqt vs llama.cpp on one GGUF model (default: a random 154M ternary model)");
    command->add_option("model", args->model_path, "a GGUF file from `dqt export` (default: build a random ternary model)");
    add_model_flags(*command, args->model_flags, args->config_path);
    command->add_option("--bits", args->bits, "code width of the random default model: 1.58 (ternary) or 2..8")
        ->capture_default_str();
    command->add_option("--prompt-tokens", args->prompt_tokens, "prompt length")->check(positive_whole_number())->capture_default_str();
    command->add_option("--decode-tokens", args->decode_tokens, "generated tokens timed")
        ->check(positive_whole_number())
        ->capture_default_str();
    command->add_option("--repeats", args->repeats, "best of this many runs")->check(positive_whole_number())->capture_default_str();
    command->add_option("--threads", args->threads, "compute threads, for both engines")
        ->check(positive_whole_number())
        ->capture_default_str();
    add_kv_cache_flag(*command, args->kv_cache);
    add_ternary_layout_flag(*command, args->ternary_layout);
    command->add_flag("--no-llama-cpp", args->skip_llamacpp, "measure dqt only");
    command->add_option("--llama-cpp-script", args->llamacpp_script, "tools/llamacpp/interop.mjs of this checkout");
    add_bench_preset_flag(*command, args->preset);
    command->add_option("--float-type", args->float_type,
                        "GGUF type of the random model's fp matrices (its embedding and head): f32, or f16 as BitNet "
                        "b1.58 2B4T's GGUF has it (dqt then holds them in fp16 too)")
        ->check(CLI::IsMember({"f32", "f16"}))
        ->capture_default_str();
    command->add_option("--keep", args->keep_dir,
                        "write the random model's GGUF file to DIR/model.gguf and keep it, so other engines can time "
                        "the same file");
    command->add_flag("--json", args->json, "print one JSON object");
    command->callback([command, args] {
        set_num_threads(args->threads);
        require(args->keep_dir.empty() || args->model_path.empty(),
                "--keep keeps the random model the bench makes; a model file given is kept already");
        require(args->model_path.empty() || command->count("--float-type") == 0,
                "--float-type sets the random model's GGUF type; a model file given has its own");
        const std::string kept = args->keep_dir.empty() ? "" : args->keep_dir + "/model.gguf";
        require(kept.empty() || !std::filesystem::exists(kept),
                kept + " exists: remove it or give another --keep folder");
        require(args->kv_cache != "int8" || args->skip_llamacpp,
                "--kv-cache int8 has no llama.cpp counterpart here (its q8_0 cache is another format): add "
                "--no-llama-cpp");
        const std::string folder =
            (std::filesystem::temp_directory_path() / ("dqt-bench-generate-" + std::to_string(getpid()))).string();
        std::filesystem::create_directories(folder);
        struct Cleanup {
            std::string path;
            ~Cleanup() { std::filesystem::remove_all(path); }
        } cleanup{folder};

        // Checked before the model is made or loaded (which takes seconds at the 2B shape).
        const auto require_context = [&](int context) {
            require(args->prompt_tokens + args->decode_tokens <= context,
                    "--prompt-tokens + --decode-tokens exceed the model's context of " + std::to_string(context));
        };
        std::string gguf = args->model_path;
        if (gguf.empty()) {
            const ModelConfig config =
                resolve_model_config(*command, args->model_flags, args->config_path, bench_model_config(args->preset));
            require_context(config.seq_len);
            MethodConfig method;
            method.kind = Method::dqt;
            method.grid = parse_code_grid(args->bits);  // ternary codes (TQ2_0) or n-bit (Q8_0)
            ModelParameters random_model(config, method);
            initialize_parameters(random_model, 1);
            if (!kept.empty()) std::filesystem::create_directories(args->keep_dir);
            gguf = kept.empty() ? folder + "/model.gguf" : kept;
            GgufExportOptions options;
            options.floats = args->float_type == "f16" ? GgufFloatFormat::f16 : GgufFloatFormat::f32;
            export_gguf(random_model, *bench_tokenizer(config), options, gguf);
        }
        const OpenedGguf opened = open_gguf(gguf);
        require_context(opened.tensors->config().seq_len);
        InferenceModel model(*opened.tensors);
        const KvCacheType cache_type = parse_kv_cache_type(args->kv_cache);
        const std::vector<TernaryLayoutTiming> layout_timing =
            hold_ternary_layout(model, parse_ternary_layout(args->ternary_layout), {1}, cache_type);
        require(model.kernels_label() != "none", "bench generate needs a model with ternary or n-bit weights");
        std::vector<int32_t> prompt(static_cast<size_t>(args->prompt_tokens));
        for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<int32_t>((i * 131 + 7) % model.config.vocab_size);

        const uint64_t cache_bytes = last_level_cache_bytes();
        ReadBandwidth read_bandwidth(cache_bytes);
        for (int pass = 0; pass < 5; ++pass) read_bandwidth.measure_pass();
        const Speeds dqt_speed = measure_dqt(model, prompt, args->decode_tokens, args->repeats, cache_type, read_bandwidth);
        const double bandwidth = read_bandwidth.bytes_per_second();
        const double kv_bytes = kv_bytes_per_decoded_token(model.config, args->prompt_tokens, args->decode_tokens,
                                                           cache_type);
        const CacheRegime regime{cache_bytes, bandwidth};
        nlohmann::json dqt_record = decode_against_bound(dqt_speed.decode_tokens_per_second,
                                                         static_cast<double>(model.weight_bytes_per_token()), kv_bytes,
                                                         bandwidth, regime);
        dqt_record["kernels"] = model.kernels_label();
        dqt_record["ternary_layout"] = args->ternary_layout;
        if (!layout_timing.empty()) {  // what auto measured at load, one decode row
            dqt_record["layout_decode_step_seconds_2bit"] = layout_timing[0].two_bit_seconds;
            dqt_record["layout_decode_step_seconds_lookup"] = layout_timing[0].lookup_seconds;
        }
        dqt_record["prompt_tokens_per_second"] = dqt_speed.prompt_tokens_per_second;
        dqt_record["decode_tokens_per_second"] = dqt_speed.decode_tokens_per_second;
        nlohmann::json record = {
            {"bench", "generate"},
            {"threads", args->threads},
            {"parameters", model.config.parameter_count()},
            {"method", model.method_label},
            {"prompt_tokens", args->prompt_tokens},
            {"decode_tokens", args->decode_tokens},
            {"kv_cache", args->kv_cache},
            {"read_bandwidth_gb_per_s", bandwidth / 1e9},
            {"bandwidth_buffer_bytes", read_bandwidth.buffer_bytes()},
            {"last_level_cache_bytes", cache_bytes},
            {"dqt", dqt_record}};
        if (!args->skip_llamacpp) {
            const std::string script = args->llamacpp_script.empty() ? default_llamacpp_script() : args->llamacpp_script;
            const Speeds llama = measure_llamacpp(script, gguf, prompt, *args, folder);
            nlohmann::json llama_record = decode_against_bound(
                llama.decode_tokens_per_second, gguf_weight_bytes_per_token(gguf), kv_bytes, bandwidth, regime);
            llama_record["prompt_tokens_per_second"] = llama.prompt_tokens_per_second;
            llama_record["decode_tokens_per_second"] = llama.decode_tokens_per_second;
            record["llama_cpp"] = llama_record;
            record["decode_ratio_dqt_over_llama_cpp"] = dqt_speed.decode_tokens_per_second / llama.decode_tokens_per_second;
            record["prompt_ratio_dqt_over_llama_cpp"] = dqt_speed.prompt_tokens_per_second / llama.prompt_tokens_per_second;
        }
        if (args->json) {
            std::printf("%s\n", record.dump().c_str());
            return;
        }
        std::printf("bench generate: %s, %lld parameters, %d threads, prompt %d tokens, decode %d tokens (best of %d)\n",
                    model.method_label.c_str(), static_cast<long long>(model.config.parameter_count()), args->threads,
                    args->prompt_tokens, args->decode_tokens, args->repeats);
        if (cache_bytes > 0) {
            std::printf("  read bandwidth measured here: %.1f GB/s over %.0f MiB (last-level cache: %.0f MiB)\n",
                        bandwidth / 1e9, static_cast<double>(read_bandwidth.buffer_bytes()) / (1 << 20),
                        static_cast<double>(cache_bytes) / (1 << 20));
        } else {
            std::printf("  read bandwidth measured here: %.1f GB/s over %.0f MiB (last-level cache size unreadable: "
                        "a token's bytes read back at %.1f GB/s, so they %s)\n",
                        bandwidth / 1e9, static_cast<double>(read_bandwidth.buffer_bytes()) / (1 << 20),
                        record["dqt"]["read_gb_per_s_at_token_size"].get<double>(),
                        record["dqt"]["regime"] == "cache-resident" ? "sit in a cache" : "come from memory");
        }
        auto line = [&](const char* engine, const nlohmann::json& r) {
            const double bytes = r["weight_bytes_per_token"].get<double>() + r["kv_bytes_per_token"].get<double>();
            std::printf("  %-10s prompt %8.1f tok/s   decode %7.1f tok/s   %6.1f MB read/token (weights + KV)   ",
                        engine, r["prompt_tokens_per_second"].get<double>(), r["decode_tokens_per_second"].get<double>(),
                        bytes / 1e6);
            if (r["regime"] == "cache-resident") {
                std::printf("fits in the last-level cache: %.1f GB/s from cache, no memory bound applies\n",
                            r["decode_read_gb_per_s"].get<double>());
            } else {
                std::printf("%3.0f%% of the bandwidth bound\n", 100.0 * r["decode_fraction_of_bandwidth_bound"].get<double>());
            }
        };
        line("dqt", record["dqt"]);
        std::printf("  dqt kernels: %s", model.kernels_label().c_str());
        if (!layout_timing.empty()) std::printf(" (%s)", describe_layout_timings(layout_timing).c_str());
        std::printf("\n");
        if (record.contains("llama_cpp")) {
            line("llama.cpp", record["llama_cpp"]);
            std::printf("  dqt / llama.cpp: decode %.2fx, prompt %.2fx\n", record["decode_ratio_dqt_over_llama_cpp"].get<double>(),
                        record["prompt_ratio_dqt_over_llama_cpp"].get<double>());
        }
    });
}

}  // namespace dqt::cli
