#pragma once
// The settings `dqt train --method dqt` starts from (docs/results.md, "A fair comparison" and
// "Closing the gap"). A setting given explicitly on the command line wins over its recipe.
//   tuned      the grid step learned (ScaleRule::learned), peak learning rate 3e-3, beta1 0.9
//              and a cosine schedule down to 0 (the tuning grid's best ternary point), and for
//              ternary codes a 6-bit sub-grid residual that may run one grid step past the
//              outer codes (overhang 1: one byte a weight of optimizer state). On the
//              reproduction setup (with --init-std 0.04, the grid's best for every method) it
//              ends within 1% of bitnet's best on SOTU and on two texts no tuning saw
//              (seed 1234: +0.6%, +0.8%, -0.4%), where the 8-bit residual without overhang, the
//              recipe before it, trailed by 2.6-4.6% there; +13.3% without any residual. (Before the
//              grid, the recipe was beta1 0.98 without a residual: +9.2%.)
//   reference  the paper's rule: the max-rule scale (fixed for ternary codes), no residual, with
//              the common defaults of TrainOptions (beta1 0.9, lr 2e-3, schedule down to 10% of
//              the peak).
#include <string>

#include "train/options.h"

namespace dqt {

enum class DqtRecipe { tuned, reference };

DqtRecipe parse_dqt_recipe(const std::string& name);  // throws dqt::Error for an unknown name
const char* dqt_recipe_name(DqtRecipe recipe);

// What a recipe sets.
struct DqtRecipeSettings {
    ScaleRule scale_rule;
    // Sub-grid residual and overhang (model/method.h) of ternary runs, where they were
    // measured; runs of 2-8 bits get none from a recipe.
    int ternary_residual_bits;
    int ternary_overhang;
    float beta1;
    float lr;            // peak learning rate
    float min_lr_ratio;  // where the cosine schedule ends, as a fraction of the peak
};
DqtRecipeSettings dqt_recipe_settings(DqtRecipe recipe);

// Which of the settings a recipe chooses the user gave explicitly; those are left as they are.
struct ExplicitSettings {
    bool scale_rule = false;
    bool residual_bits = false;
    bool overhang = false;
    bool beta1 = false;
    bool lr = false;
    bool min_lr_ratio = false;
};

// Applies `recipe` to a dqt method's settings (scale rule, residual), except where `given` says
// the user chose. Another method is left unchanged (the recipe is dqt's).
void apply_dqt_recipe(DqtRecipe recipe, const ExplicitSettings& given, MethodConfig& method);
// The same, and the optimizer's settings of the recipe, to a run's options.
void apply_dqt_recipe(DqtRecipe recipe, const ExplicitSettings& given, TrainOptions& options);
// The optimizer's settings alone (beta1, learning rate, schedule end): for options whose method
// already went through the recipe (app/'s resolve_method_config).
void apply_dqt_recipe_optimizer(DqtRecipe recipe, const ExplicitSettings& given, TrainOptions& options);

}  // namespace dqt
