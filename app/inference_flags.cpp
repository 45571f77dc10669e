#include "commands.h"

namespace dqt::cli {

void add_ternary_rule_flag(CLI::App& command, std::string& rule) {
    command.add_option("--ternary-rule", rule, "with --ternary: absmean (BitNet's) or twn (better for n-bit dqt)")
        ->check(CLI::IsMember({"absmean", "twn"}))
        ->capture_default_str();
}

void add_kv_cache_flag(CLI::App& command, std::string& type) {
    command.add_option("--kv-cache", type,
                       "KV cache: f32 (decode gives the full forward's logits: bit for bit with a quantized head, "
                       "to float rounding with a float one), f16 (half the memory) or int8 (a little over a "
                       "quarter: codes and a scale per head and position)")
        ->check(CLI::IsMember({"f16", "f32", "int8"}))
        ->capture_default_str();
}

void add_ternary_layout_flag(CLI::App& command, std::string& layout) {
    command.add_option("--ternary-layout", layout,
                       "ternary weights in memory: auto (the faster at this command's batch sizes, timed on this model at load), "
                       "2bit, or lookup (1.67 bits, AVX-512 VNNI); the logits are the same")
        ->check(CLI::IsMember({"auto", "2bit", "lookup"}))
        ->capture_default_str();
}

}  // namespace dqt::cli
