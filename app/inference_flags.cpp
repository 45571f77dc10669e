#include "commands.h"

namespace dqt::cli {

void add_ternary_rule_flag(CLI::App& command, std::string& rule) {
    command.add_option("--ternary-rule", rule, "with --ternary: absmean (BitNet's) or twn (better for n-bit dqt)")
        ->check(CLI::IsMember({"absmean", "twn"}))
        ->capture_default_str();
}

}  // namespace dqt::cli
