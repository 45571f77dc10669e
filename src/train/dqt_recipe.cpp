#include "train/dqt_recipe.h"

#include "core/error.h"

namespace dqt {

DqtRecipe parse_dqt_recipe(const std::string& name) {
    if (name == "tuned") return DqtRecipe::tuned;
    if (name == "reference") return DqtRecipe::reference;
    throw Error("unknown dqt recipe '" + name + "': use tuned or reference");
}

const char* dqt_recipe_name(DqtRecipe recipe) { return recipe == DqtRecipe::tuned ? "tuned" : "reference"; }

DqtRecipeSettings dqt_recipe_settings(DqtRecipe recipe) {
    if (recipe == DqtRecipe::tuned) return {ScaleRule::learned, 6, 1, 0.9f, 3e-3f, 0.0f};
    const TrainOptions common;
    return {ScaleRule::reference, 0, 0, common.adam.beta1, common.lr, common.min_lr_ratio};
}

void apply_dqt_recipe(DqtRecipe recipe, const ExplicitSettings& given, MethodConfig& method) {
    if (method.kind != Method::dqt) return;
    const DqtRecipeSettings settings = dqt_recipe_settings(recipe);
    if (!given.scale_rule) method.scale_rule = settings.scale_rule;
    if (!method.grid.ternary()) return;
    // The overhang belongs to the recipe's residual: with residual bits of the user's own (8
    // leaves no room in the byte, 0 has no fine position) it stays the user's, or none.
    if (given.residual_bits) return;
    method.residual_bits = settings.ternary_residual_bits;
    if (!given.overhang) method.residual_overhang = settings.ternary_overhang;
}

void apply_dqt_recipe(DqtRecipe recipe, const ExplicitSettings& given, TrainOptions& options) {
    apply_dqt_recipe(recipe, given, options.method);
    apply_dqt_recipe_optimizer(recipe, given, options);
}

void apply_dqt_recipe_optimizer(DqtRecipe recipe, const ExplicitSettings& given, TrainOptions& options) {
    if (options.method.kind != Method::dqt) return;
    const DqtRecipeSettings settings = dqt_recipe_settings(recipe);
    if (!given.beta1) options.adam.beta1 = settings.beta1;
    if (!given.lr) options.lr = settings.lr;
    if (!given.min_lr_ratio) options.min_lr_ratio = settings.min_lr_ratio;
}

}  // namespace dqt
