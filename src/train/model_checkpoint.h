#pragma once
// A training run's checkpoint: model config, training options, step, tokenizer, parameters
// and optimizer state, in the checksummed container of io/checkpoint.h.
#include <memory>
#include <string>

#include "data/tokenizer.h"
#include "model/parameters.h"
#include "optim/optimizer_state.h"
#include "train/options.h"

namespace dqt {

// Where a run stands between two steps: what a resumed run needs besides weights and state.
struct TrainingPosition {
    int step = 0;                     // optimizer steps done
    double previous_grad_norm = 0.0;  // the last step's gradient norm (fused updates clip with it)
};

// Written atomically (temp file, fsync, rename).
void save_training_checkpoint(const std::string& path, const TrainOptions& options, const TrainingPosition& position,
                              const ModelParameters& model, const OptimizerState& state, const Tokenizer& tokenizer);

struct LoadedModel {
    std::unique_ptr<ModelParameters> model;
    std::unique_ptr<Tokenizer> tokenizer;
    TrainOptions options;
    int step = 0;
};

// Model and tokenizer only, no optimizer state (eval, generate, export).
LoadedModel load_model_checkpoint(const std::string& path);
// Restores parameters and optimizer state into existing objects built from the same
// config (resume); returns where the run stood.
TrainingPosition load_training_state(const std::string& path, ModelParameters& model, OptimizerState& state);
// Options stored in a checkpoint.
TrainOptions read_checkpoint_options(const std::string& path);
// The tokenizer a checkpoint's run trained with.
std::unique_ptr<Tokenizer> read_checkpoint_tokenizer(const std::string& path);

}  // namespace dqt
