#include <malloc.h>

#include <csignal>
#include <cstdio>
#include <filesystem>
#include <thread>

#include "commands.h"
#include "model_files.h"
#include "core/parallel.h"
#include "infer/inference_model.h"
#include "infer/ternary_layout.h"
#include "serve/engine.h"
#include "serve/http_server.h"

namespace dqt::cli {

namespace {
struct ServeArgs {
    std::string model;
    std::string name;
    std::string host = "127.0.0.1";
    int port = 8080;
    int threads = 0;
    EngineOptions engine;
    std::string kv_cache = "f32";
    std::string ternary_layout = "auto";
    std::vector<std::string> allowed_origins;
};

// The id clients name the model by: the file's name without its extension, or the run
// folder's name for a training checkpoint (runs/NAME/checkpoint.dqt).
std::string default_model_name(const std::string& path) {
    const std::filesystem::path p(path);
    if (p.filename() == "checkpoint.dqt" && p.has_parent_path() && !p.parent_path().filename().empty())
        return p.parent_path().filename().string();
    return p.stem().string();
}
}  // namespace

void add_serve_command(CLI::App& app) {
    auto args = std::make_shared<ServeArgs>();
    CLI::App* command = app.add_subcommand("serve", "serve a model over an OpenAI-compatible HTTP API");
    command->add_option("model,--model", args->model, "checkpoint, GGUF file or Hugging Face model folder")->required();
    command->add_option("--name", args->name, "the model id clients use (default: from the file name)");
    command->add_option("--host", args->host, "address to listen on")->capture_default_str();
    command->add_option("--port", args->port, "port to listen on (0 = any free port)")
        ->check(CLI::Range(0, 65535))
        ->capture_default_str();
    // Bounded: each slot and queue place holds an HTTP handler thread, and an engine step's
    // work grows with the slots.
    command->add_option("--parallel", args->engine.parallel, "sequences generated at once (slots), 1 to 1024")
        ->check(CLI::Range(1, 1024))
        ->capture_default_str();
    command->add_option("--queue", args->engine.queue, "requests that may wait for a slot (then 503), 0 to 4096")
        ->check(CLI::Range(0, 4096))
        ->capture_default_str();
    command->add_option("--context", args->engine.context, "positions of each slot's KV cache (0 = the model's)")
        ->check(non_negative_whole_number())
        ->capture_default_str();
    command->add_option("--allow-origin", args->allowed_origins,
                        "answer cross-origin requests from this browser origin (e.g. http://localhost:3000; * for "
                        "any; repeatable; default: none)")
        ->check(CLI::Validator(
            [](std::string& origin) {
                return origin.empty() || origin.find_first_of(" \t\r\n") != std::string::npos
                           ? std::string("an origin is a scheme, host and port such as http://localhost:3000, or *")
                           : std::string();
            },
            "ORIGIN"));
    add_kv_cache_flag(*command, args->kv_cache);
    add_ternary_layout_flag(*command, args->ternary_layout);
    add_threads_flag(*command, args->threads);
    command->callback([args] {
        // SIGINT and SIGTERM end the server from a thread of their own (stop() is not
        // async-signal-safe). Blocked here, before any thread starts (OpenMP's team, the
        // engine's worker, the HTTP pool inherit the mask), so only that thread receives them.
        sigset_t signals;
        sigemptyset(&signals);
        sigaddset(&signals, SIGINT);
        sigaddset(&signals, SIGTERM);
        pthread_sigmask(SIG_BLOCK, &signals, nullptr);
        // Request bodies up to 8 MiB come and go: glibc would serve them from its heaps once the
        // first was freed (its mmap threshold follows the largest freed block) and keep that
        // memory after. A fixed threshold maps each from the system and returns it at free.
        mallopt(M_MMAP_THRESHOLD, 256 << 10);
        set_num_threads(args->threads);
        args->engine.cache_type = parse_kv_cache_type(args->kv_cache);
        const InferenceFile loaded = load_inference_file(args->model);
        // A step decodes one row per live slot: auto times one row and a full batch.
        const std::vector<TernaryLayoutTiming> layout_timing =
            hold_ternary_layout(*loaded.model, parse_ternary_layout(args->ternary_layout), {1, args->engine.parallel},
                                args->engine.cache_type);
        if (!layout_timing.empty()) std::fprintf(stderr, "dqt serve: %s\n", describe_layout_timings(layout_timing).c_str());
        const InferenceModel& model = *loaded.model;
        Engine engine(model, *loaded.tokenizer, args->engine);
        const std::string name = args->name.empty() ? default_model_name(args->model) : args->name;
        ApiServer server(engine, *loaded.tokenizer, loaded.special, name, args->allowed_origins);

        const int port = server.bind(args->host, args->port);
        std::thread on_signal([&] {
            int received = 0;
            sigwait(&signals, &received);
            server.stop();
        });
        std::fprintf(stderr,
                     "dqt serve: %s on http://%s:%d/v1 (%d slots of %d positions: %.1f MiB of KV cache, %.1f MiB "
                     "of scratch; kernels: %s)\n",
                     name.c_str(), args->host.c_str(), port, engine.parallel(), engine.context(),
                     static_cast<double>(engine.kv_pool_bytes()) / (1 << 20),
                     static_cast<double>(engine.scratch_bytes()) / (1 << 20),
                     model.kernels_label().c_str());
        server.serve();
        pthread_kill(on_signal.native_handle(), SIGTERM);  // server.stop() ran, or listening failed
        on_signal.join();
    });
}

}  // namespace dqt::cli
