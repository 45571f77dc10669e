#pragma once
// A training run's checkpoint: model config, training options, step, tokenizer, parameters
// and optimizer state, in the checksummed container of io/checkpoint.h.
#include <memory>
#include <string>

#include "data/tokenizer.h"
#include "io/background_checkpoint.h"
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
// The same file written by `writer` on its own thread: returns once the state is copied, so
// training may go on (the copy's size is that of the file). writer.wait() says when it is on disk.
void start_training_checkpoint(BackgroundCheckpointWriter& writer, const std::string& path, const TrainOptions& options,
                               const TrainingPosition& position, const ModelParameters& model,
                               const OptimizerState& state, const Tokenizer& tokenizer);
// Has `writer` allocate, in the background, the copy that start_training_checkpoint will need
// for this model and state (for a data-parallel shard of the state: the shard's size only).
void reserve_training_checkpoint(BackgroundCheckpointWriter& writer, const TrainOptions& options,
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
// What a resume needs to know before it allocates anything, from one read of the file: the
// run's options (checked against the stored tensors), its tokenizer and the steps done.
struct CheckpointRun {
    TrainOptions options;
    std::unique_ptr<Tokenizer> tokenizer;
    int step = 0;
};
CheckpointRun read_checkpoint_run(const std::string& path);

}  // namespace dqt
