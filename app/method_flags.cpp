#include "commands.h"
#include "core/error.h"
#include "train/dqt_recipe.h"

namespace dqt::cli {

void add_method_flags(CLI::App& command, MethodFlags& f) {
    command.add_option("--method", f.method, "training method: fp, bitnet (ternary STE) or dqt (integer weights)")
        ->capture_default_str();
    command.add_option("--bits", f.bits, "dqt weight codes: 1.58 (ternary) or 2..8")->capture_default_str();
    command.add_option("--rounding", f.rounding, "dqt update rounding: stochastic, or nearest (ablation)")
        ->capture_default_str();
    command.add_option("--dqt-recipe", f.recipe,
                       "dqt defaults: tuned (learned grid step, --lr 3e-3, --min-lr-ratio 0, and for ternary codes "
                       "--dqt-residual-bits 6 --dqt-overhang 1) or "
                       "reference (the paper's max-rule scale and the common defaults); flags given win")
        ->capture_default_str();
    command.add_option("--dqt-scale", f.scale_rule,
                       "dqt scale: reference (the paper's max rule; fixed for ternary) or learned (Adam on the "
                       "grid step); default: the recipe's");
    command.add_option("--dqt-residual-bits", f.residual_bits,
                       "dqt: keep each coded weight's position between grid points in this many bits (1..8, one "
                       "byte a weight; the update rounds stochastically onto that finer grid); default: the recipe's "
                       "(tuned: 6 for ternary codes, otherwise 0: none)")
        ->check(CLI::Range(0, 8));
    command.add_option("--dqt-overhang", f.residual_overhang,
                       "dqt with --dqt-residual-bits: grid steps a weight's fine position may run past the "
                       "outermost codes, so a weight pushed beyond them flips back later (hysteresis); default: the "
                       "recipe's (tuned: 1 for ternary codes, otherwise 0)")
        ->check(CLI::Range(0, 127));
    command.add_flag("--quantize-embedding", f.quantize_embedding, "dqt: store the token embedding as codes too");
    command.add_flag("--quantize-head", f.quantize_head, "bitnet/dqt: quantize the lm_head too (default: fp32; tied to the embedding, the default, "
                     "bitnet needs --untie-embeddings, dqt --quantize-embedding too)");
    command.add_option("--compute-dtype", f.compute_dtype, "GEMM operands: fp32 or bf16")->capture_default_str();
    command.add_option("--optim-state", f.optim_state, "Adam moments: 32 (fp32), 16 (bf16) or 8 (block-wise 8-bit) bits")
        ->capture_default_str();
}

MethodConfig resolve_method_config(const CLI::App& command, const MethodFlags& f) {
    MethodConfig config;
    config.kind = parse_method(f.method);
    if (config.kind != Method::dqt) {
        require(command.count("--bits") == 0, "--bits applies to --method dqt only");
        require(command.count("--rounding") == 0, "--rounding applies to --method dqt only");
        require(command.count("--dqt-scale") == 0, "--dqt-scale applies to --method dqt only");
        require(command.count("--dqt-recipe") == 0, "--dqt-recipe applies to --method dqt only");
        require(command.count("--dqt-residual-bits") == 0, "--dqt-residual-bits applies to --method dqt only");
        require(command.count("--dqt-overhang") == 0, "--dqt-overhang applies to --method dqt only");
    }
    config.grid = parse_code_grid(f.bits);
    config.rounding = parse_rounding(f.rounding);
    if (command.count("--dqt-scale") > 0) config.scale_rule = parse_scale_rule(f.scale_rule);
    config.quantize_embedding = f.quantize_embedding;
    config.quantize_head = f.quantize_head;
    config.residual_bits = f.residual_bits;
    config.residual_overhang = f.residual_overhang;
    config.compute = parse_compute_dtype(f.compute_dtype);
    apply_dqt_recipe(parse_dqt_recipe(f.recipe), explicit_settings(command), config);
    config.validate();
    return config;
}

ExplicitSettings explicit_settings(const CLI::App& command) {
    // A command without an option (bench train has no --lr) cannot have been given it.
    const auto given_flag = [&](const std::string& name) {
        const CLI::Option* option = command.get_option_no_throw(name);
        return option != nullptr && option->count() > 0;
    };
    ExplicitSettings given;
    given.scale_rule = given_flag("--dqt-scale");
    given.residual_bits = given_flag("--dqt-residual-bits");
    given.overhang = given_flag("--dqt-overhang");
    given.beta1 = given_flag("--beta1");
    given.lr = given_flag("--lr");
    given.min_lr_ratio = given_flag("--min-lr-ratio");
    return given;
}

StateDtype resolve_optim_state(const MethodFlags& f) { return parse_state_dtype(f.optim_state); }

}  // namespace dqt::cli
