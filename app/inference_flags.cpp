#include "commands.h"
#include "kernels/ternary_matmul.h"

namespace dqt::cli {

void add_ternary_rule_flag(CLI::App& command, std::string& rule) {
    command.add_option("--ternary-rule", rule, "with --ternary: absmean (BitNet's) or twn (better for n-bit dqt)")
        ->check(CLI::IsMember({"absmean", "twn"}))
        ->capture_default_str();
}

void add_dense_flag(CLI::App& command, bool& dense) {
    command.add_flag("--dense", dense,
                     "run ternary weights through the dense fp32 path instead of the ternary x int8 kernels");
}

std::string kernels_label(const ModelParameters& model) {
    for (const TernaryMatrix& packed : model.ternary_packed)
        if (packed.rows > 0) return ternary_isa_name(best_ternary_isa());
    return "none";
}

}  // namespace dqt::cli
