#include <map>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "core/parallel.h"

namespace dqt::cli {

namespace {
// Flag name -> the JSON key it overrides, so --config can be read first and flags win.
const std::pair<const char*, const char*> kModelFlagKeys[] = {
    {"--dim", "dim"},         {"--layers", "n_layers"},   {"--heads", "n_heads"},
    {"--kv-heads", "n_kv_heads"}, {"--ffn", "ffn_dim"},   {"--vocab-size", "vocab_size"},
    {"--seq-len", "seq_len"}, {"--no-subln", "subln"},    {"--rope-theta", "rope_theta"},
    {"--init-std", "init_std"}, {"--tie-embeddings", "tie_embeddings"}, {"--ffn-act", "ffn_activation"}};
}  // namespace

void add_model_flags(CLI::App& command, ModelConfig& c, std::string& config_path) {
    command.add_option("--config", config_path, "model config JSON (flags below override it)")->check(CLI::ExistingFile);
    command.add_option("--dim", c.dim, "hidden size")->capture_default_str();
    command.add_option("--layers", c.n_layers, "number of blocks")->capture_default_str();
    command.add_option("--heads", c.n_heads, "attention heads")->capture_default_str();
    command.add_option("--kv-heads", c.n_kv_heads, "key/value heads (grouped-query attention; default: --heads, or a --preset's)");
    command.add_option("--ffn", c.ffn_dim, "FFN inner size")->capture_default_str();
    command.add_option("--ffn-act", c.ffn_activation, "FFN gate: silu (SwiGLU) or relu2 (ReLU^2-GLU, BitNet b1.58 2B4T)")
        ->transform(CLI::CheckedTransformer(
            std::map<std::string, GatedActivation>{{"silu", GatedActivation::silu}, {"relu2", GatedActivation::relu2}}))
        ->default_str("silu");
    command.add_option("--vocab-size", c.vocab_size, "vocabulary size (default: train takes the dataset tokenizer's; a bench command, its own "
                       "model's)");
    command.add_option("--seq-len", c.seq_len, "context length in tokens")->capture_default_str();
    command.add_flag("--no-subln{false}", c.subln, "drop the SubLN norms before o_proj and down_proj");
    command.add_option("--rope-theta", c.rope_theta, "rotary embedding base")->capture_default_str();
    command.add_option("--init-std", c.init_std, "std of the N(0, s) weight init")->capture_default_str();
    command.add_flag("--tie-embeddings,!--untie-embeddings", c.tie_embeddings,
                     "the lm_head reads token_embd (the default, but for bench train and bench memory, whose "
                     "reference shapes are untied; llama.cpp runs a SubLN model only tied); "
                     "--untie-embeddings gives the head its own table");
}

ModelConfig resolve_model_config(const CLI::App& command, const ModelConfig& flags, const std::string& config_path,
                                 const ModelConfig& defaults) {
    nlohmann::json given = config_path.empty() ? nlohmann::json::object() : load_model_config_json(config_path);
    const nlohmann::json flag_values = flags;
    for (const auto& [flag, key] : kModelFlagKeys) {
        if (command.count(flag) > 0) given[key] = flag_values[key];
    }
    // Heads given without kv heads mean full multi-head attention, as in a config file; the
    // defaults' kv heads (a preset's grouped-query attention) hold only when neither is given.
    if (given.contains("n_heads") && !given.contains("n_kv_heads")) given["n_kv_heads"] = given["n_heads"];
    nlohmann::json merged = defaults;  // load_model_config_json gave an object
    merged.update(given);
    ModelConfig result;
    from_json(merged, result);
    return result;
}

void add_threads_flag(CLI::App& command, int& threads) {
    command.add_option("--threads", threads, "compute threads (0 = every CPU this process may use; OMP_NUM_THREADS, when set, wins)")->capture_default_str();
}

}  // namespace dqt::cli
