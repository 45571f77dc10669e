#pragma once
// The settings `dqt train --method dqt` starts from (docs/results.md, "Ternary DQT against
// BitNet"). A setting given explicitly on the command line wins over its recipe.
//   tuned      the grid step learned (ScaleRule::learned), Adam beta1 0.98, peak learning rate
//              3e-3 and a cosine schedule down to 0: ternary dqt at +4.4% of bitnet's validation
//              loss against +18.4% for the reference (the default since that measurement).
//   reference  the paper's rule: the max-rule scale (fixed for ternary codes), with the common
//              defaults of TrainOptions (beta1 0.9, lr 2e-3, schedule down to 10% of the peak).
#include <string>

#include "train/options.h"

namespace dqt {

enum class DqtRecipe { tuned, reference };

DqtRecipe parse_dqt_recipe(const std::string& name);  // throws dqt::Error for an unknown name
const char* dqt_recipe_name(DqtRecipe recipe);

// What a recipe sets.
struct DqtRecipeSettings {
    ScaleRule scale_rule;
    float beta1;
    float lr;            // peak learning rate
    float min_lr_ratio;  // where the cosine schedule ends, as a fraction of the peak
};
DqtRecipeSettings dqt_recipe_settings(DqtRecipe recipe);

// Which of the settings a recipe chooses the user gave explicitly; those are left as they are.
struct ExplicitSettings {
    bool scale_rule = false;
    bool beta1 = false;
    bool lr = false;
    bool min_lr_ratio = false;
};

// Applies `recipe` to a dqt run's options, except where `given` says the user chose. Options of
// another method are left unchanged (the recipe is dqt's).
void apply_dqt_recipe(DqtRecipe recipe, const ExplicitSettings& given, TrainOptions& options);

}  // namespace dqt
