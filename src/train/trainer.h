#pragma once
// The training loop: sample, forward, backward, clip, update, log, evaluate, checkpoint.
#include <cstdint>
#include <memory>
#include <string>

#include "data/tokenizer.h"
#include "model/parameters.h"
#include "train/options.h"

namespace dqt {

// The trained model a new run starts from (--init-from), loaded by the caller: its weights are
// carried into the run's formats (model/weight_transfer.h) and then freed; its tokenizer must
// be the dataset's.
struct InitialModel {
    std::unique_ptr<ModelParameters> model;
    std::unique_ptr<Tokenizer> tokenizer;
};

struct RunControl {
    bool resume = false;        // continue from out_dir/checkpoint.dqt
    int stop_after_step = 0;    // > 0: checkpoint and stop after this step (an interruption)
    bool interactive = false;   // live status line (a terminal) instead of plain lines
    bool quiet = false;         // no progress output at all (tests)
    int code_stats_every = 0;   // > 0: log how the quantized weights' codes move (train/code_dynamics.h)
    bool overwrite = false;     // start over in a folder that holds a checkpoint (else refused)
    bool async_checkpoint = false;  // write checkpoints on a background thread (same bytes)
    // A step with a non-finite loss or gradient norm: stop the run without saving its weights
    // (the last checkpoint stays), or skip it (no update) and go on.
    enum class NonFinite { stop, skip } on_nonfinite = NonFinite::stop;
};

struct TrainReport {
    int steps_done = 0;            // optimizer steps completed in total (including resumed ones)
    double final_train_loss = 0.0; // nats/token of the last step
    double val_loss = 0.0;         // nats/token at the end
    double val_bits_per_byte = 0.0;
    double tokens_per_second = 0.0;
    int skipped_steps = 0;         // with --on-nonfinite skip: steps not applied
    std::string checkpoint_path;
};

// `init`: a new run's initial weights (options.init_from names their file); none: drawn from the seed.
TrainReport run_training(const TrainOptions& options, const RunControl& control, InitialModel init = {});

// Paths inside a run folder.
std::string checkpoint_path_in(const std::string& out_dir);
std::string metrics_path_in(const std::string& out_dir);

}  // namespace dqt
