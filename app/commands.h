#pragma once
// The `dqt` subcommands. Each registers its options on a CLI11 subcommand and runs when
// that subcommand was chosen.
#include <string>

#include <CLI/CLI.hpp>

#include "model/config.h"
#include "model/method.h"
#include "model/parameters.h"
#include "train/dqt_recipe.h"
#include "optim/optimizer_state.h"

namespace dqt::cli {

void add_data_command(CLI::App& app);
void add_train_command(CLI::App& app);
void add_eval_command(CLI::App& app);
void add_generate_command(CLI::App& app);
void add_serve_command(CLI::App& app);
void add_export_command(CLI::App& app);
void add_bench_command(CLI::App& app);  // `dqt bench` and its subcommands: bench/commands/

// The flags below are shared with the `dqt bench` subcommands (bench/commands/).

// Model-shape flags shared by train and bench (--config, --dim, --layers, ...).
void add_model_flags(CLI::App& command, ModelConfig& config, std::string& config_path);
// The model config of a command: `defaults`, then --config FILE, then the flags given
// explicitly on the command line (flags win). `config` holds the parsed flag values.
ModelConfig resolve_model_config(const CLI::App& command, const ModelConfig& config, const std::string& config_path,
                                 const ModelConfig& defaults);
// Training-method flags shared by train and bench (--method, --bits, --rounding, ...).
struct MethodFlags {
    std::string method = "fp";
    std::string bits = "1.58";
    std::string rounding = "stochastic";
    std::string recipe = "tuned";        // --dqt-recipe (train/dqt_recipe.h)
    std::string scale_rule = "learned";  // --dqt-scale; used only when given
    std::string compute_dtype = "fp32";
    std::string optim_state = "32";
    bool quantize_embedding = false;
    bool quantize_head = false;
    int residual_bits = 0;               // --dqt-residual-bits
    int residual_overhang = 0;           // --dqt-overhang
};
void add_method_flags(CLI::App& command, MethodFlags& flags);
// Parses and validates the flags; --bits and --rounding given without --method dqt are errors.
// A dqt scale rule, residual and overhang not given are the --dqt-recipe's.
MethodConfig resolve_method_config(const CLI::App& command, const MethodFlags& flags);
// Which settings of the dqt recipe (train/dqt_recipe.h) the command line gave explicitly.
ExplicitSettings explicit_settings(const CLI::App& command);
StateDtype resolve_optim_state(const MethodFlags& flags);

// Checks for whole-number flags, in place of CLI11's PositiveNumber and NonNegativeNumber
// (whose messages print the largest double in 300 digits).
CLI::Validator positive_whole_number();
CLI::Validator non_negative_whole_number();
// A seed: a whole number from 0 to 2^64 - 1 (CLI11 alone read "-1" as 2^64 - 1 and clamped 2^64).
CLI::Validator seed_number();

// --threads N (0 = all cores); applied with dqt::set_num_threads.
void add_threads_flag(CLI::App& command, int& threads);

// --ternary-rule absmean|twn: how --ternary re-snaps quantized weights (model/ternary_convert.h).
void add_ternary_rule_flag(CLI::App& command, std::string& rule);
// --kv-cache f32|f16|int8: what the KV cache of generation or evaluation stores (infer/session.h).
void add_kv_cache_flag(CLI::App& command, std::string& type);
// --ternary-layout: infer/ternary_layout.h's choice (auto, 2bit, lookup).
void add_ternary_layout_flag(CLI::App& command, std::string& layout);

}  // namespace dqt::cli
