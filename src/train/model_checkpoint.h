#pragma once
// A training run's checkpoint: model config, training options, step, tokenizer, parameters
// and optimizer state, in the checksummed container of io/checkpoint.h.
#include <memory>
#include <string>

#include "data/tokenizer.h"
#include "data_parallel/shard_plan.h"
#include "io/background_checkpoint.h"
#include "model/parameters.h"
#include "model/tensor_source.h"
#include "optim/optimizer_state.h"
#include "train/options.h"

namespace dqt {

// Where a run stands between two steps: what a resumed run needs besides weights and state.
struct TrainingPosition {
    int step = 0;                     // optimizer steps done
    double previous_grad_norm = 0.0;  // the last step's gradient norm (fused updates clip with it)
};

// What compressed data-parallel transfers carry from step to step (data_parallel/compression.h),
// gathered on rank 0: every rank's gradient residual, concatenated in rank order
// ("comm.gradient_residual", tied to the rank count), and the exact fp32 values that the
// shards' owners keep under --compress-weights ("comm.weight_master", layout.value_total).
// Null: not stored.
struct CommunicationState {
    int residual_ranks = 0;
    const float* gradient_residuals = nullptr;
    size_t gradient_residual_count = 0;
    const float* weight_master = nullptr;
};

// Written atomically (temp file, fsync, rename).
void save_training_checkpoint(const std::string& path, const TrainOptions& options, const TrainingPosition& position,
                              const ModelParameters& model, const OptimizerState& state, const Tokenizer& tokenizer,
                              const CommunicationState& communication = {});
// The same file written by `writer` on its own thread: returns once the state is copied, so
// training may go on (the copy's size is that of the file). writer.wait() says when it is on disk.
void start_training_checkpoint(BackgroundCheckpointWriter& writer, const std::string& path, const TrainOptions& options,
                               const TrainingPosition& position, const ModelParameters& model,
                               const OptimizerState& state, const Tokenizer& tokenizer,
                               const CommunicationState& communication = {});
// Has `writer` allocate, in the background, the copy that start_training_checkpoint will need
// for this model and state (for a data-parallel shard of the state: the shard's size only).
void reserve_training_checkpoint(BackgroundCheckpointWriter& writer, const TrainOptions& options,
                                 const ModelParameters& model, const OptimizerState& state, const Tokenizer& tokenizer);

// What a resume needs to know before it allocates anything, from one read of the file: the
// run's options (checked against the stored tensors), its tokenizer and the steps done.
struct CheckpointRun {
    TrainOptions options;
    std::unique_ptr<Tokenizer> tokenizer;
    int step = 0;
};
CheckpointRun read_checkpoint_run(const std::string& path);

struct LoadedModel : CheckpointRun {
    std::unique_ptr<ModelParameters> model;
};

// Model and tokenizer only, no optimizer state (eval, generate, export).
LoadedModel load_model_checkpoint(const std::string& path);
// The same with the model as a TensorSource (model/tensor_source.h) that reads each tensor from
// the file when asked: an InferenceModel built from it holds one copy of the weights. The file is
// checked as load_model_checkpoint checks it before anything is read.
struct OpenedCheckpoint : CheckpointRun {
    std::unique_ptr<TensorSource> tensors;
};
OpenedCheckpoint open_model_checkpoint(const std::string& path);
// Restores parameters and optimizer state into existing objects built from the same
// config (resume); returns where the run stood.
TrainingPosition load_training_state(const std::string& path, ModelParameters& model, OptimizerState& state);
// Restores one rank's part of a CommunicationState (resume), into buffers that exist only when
// the run compresses: `residual` (rank `rank` of `ranks`; each rank r's residual holds
// layout.total minus its shard's size) when the checkpoint's residuals come from `ranks` ranks,
// and `master`, rank `rank`'s shard of the fp32 values (from plan.value_cut[rank]), when exact
// values are stored (else it keeps what it holds: the loaded values). Returns false when residuals were wanted but the
// checkpoint holds none for this rank count: they stay zero.
bool load_communication_state(const std::string& path, const ShardPlan& plan, int rank, Array<float>* residual,
                              Array<float>* master);

}  // namespace dqt
