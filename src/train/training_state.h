#pragma once
// What a training run carries from step to step, and its checkpoint: the model, this rank's
// share of the optimizer state, the step function with what compressed transfers carry, and
// where the run stands. TrainingState builds it fresh or resumes it from the run's checkpoint,
// and saves it: under mpirun every rank takes part in the gathers, rank 0 writes the file.
#include <optional>
#include <string>

#include "data/tokenizer.h"
#include "data_parallel/comm.h"
#include "data_parallel/shard_plan.h"
#include "io/background_checkpoint.h"
#include "model/parameters.h"
#include "optim/optimizer_state.h"
#include "train/model_checkpoint.h"
#include "train/options.h"
#include "train/training_step.h"

namespace dqt {

class TrainingState {
public:
    // Resumes from checkpoint_path when `resume`; else takes the weights of `initial` in this
    // run's formats (model/weight_transfer.h), or without one draws them from the seed.
    // async_checkpoint: checkpoints are written on a background thread (reserved here).
    TrainingState(const TrainOptions& options, const Tokenizer& tokenizer, const std::string& checkpoint_path,
                  bool resume, const ModelParameters* initial, bool async_checkpoint, Communicator& comm);

    ModelParameters model;
    const ShardPlan plan;
    OptimizerState optimizer;           // this rank's shard
    TrainingPosition position;          // where the run stands (the resumed checkpoint's, or step 0)
    std::optional<TrainingStep> step;   // built after the weights are loaded
    // Said on resume when the checkpoint holds no gradient residuals for this rank count.
    std::string residual_note;

    // The checkpoint after step `done` (the whole write, or with async_checkpoint the copy a
    // background thread then writes). Collective over the ranks.
    void save(int done);
    // Returns when the last checkpoint is on disk (a background write's failure is thrown).
    void wait_for_checkpoint() { background_writer_.wait(); }

private:
    // A new run with sub-grid residuals: each coded weight starts where its real value lies on
    // the fine grid (the seed's draw, or the initial model's value; optim/dqt_update.h).
    void start_all_residuals(const ModelParameters* initial);

    const TrainOptions& options_;
    const Tokenizer& tokenizer_;
    const std::string checkpoint_path_;
    const bool async_checkpoint_;
    Communicator& comm_;
    BackgroundCheckpointWriter background_writer_;
};

}  // namespace dqt
