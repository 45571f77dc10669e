#pragma once
// The `dqt bench` subcommands, kept apart from the app's everyday ones: each times one part of
// dqt (training, memory, generation against llama.cpp, serving, the read bandwidth) and prints what it measured
// beside its limit. They register on `dqt bench` (cmd_bench.cpp) and share the app's flags
// (app/commands.h).
#include <memory>
#include <string>

#include <CLI/CLI.hpp>

#include "data/tokenizer.h"
#include "model/config.h"

namespace dqt::cli {

void add_bench_memory_command(CLI::App& bench);    // under `bench`
void add_bench_generate_command(CLI::App& bench);  // under `bench`
void add_bench_serve_command(CLI::App& bench);     // under `bench`
void add_bench_bandwidth_command(CLI::App& bench); // under `bench`
// The inference benchmarks' random model shapes: "154m" (the default) and "2b" (BitNet b1.58
// 2B4T's blocks and vocabulary size); dqt::Error for another name (cmd_bench_generate.cpp).
ModelConfig bench_model_config(const std::string& preset);
// The random model's tokenizer: bytes for a 256-entry vocabulary, else a synthetic byte-level
// BPE of the config's size (data/synthetic_bpe.h).
std::unique_ptr<Tokenizer> bench_tokenizer(const ModelConfig& config);
// --preset NAME for the benchmarks' random model.
void add_bench_preset_flag(CLI::App& command, std::string& preset);

}  // namespace dqt::cli
