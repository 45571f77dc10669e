#pragma once
// What a training run prints and writes besides its checkpoint, on rank 0 only: the progress
// display and its messages, the run's config.json, metrics.jsonl's lines (train, eval,
// checkpoint, skipped, diverged, codes, memory) and the memory report at the end. On other
// ranks a RunLog writes and prints nothing; quiet (tests), it writes and does not print.
#include <cstdio>
#include <optional>
#include <string>

#include "infer/evaluate.h"
#include "train/code_dynamics.h"
#include "train/device_step.h"
#include "train/metrics_log.h"
#include "train/options.h"
#include "train/progress.h"
#include "train/trainer.h"
#include "train/training_state.h"
#include "train/training_step.h"

namespace dqt {

// One optimizer step as the run saw it.
struct StepOutcome {
    TrainingStep::Result result;
    double loss = 0.0;  // nats/token
    float lr = 0.0f;
    double seconds = 0.0;
};

class RunLog {
public:
    // writer: this process is rank 0. start_step: the step the run starts or resumes at.
    RunLog(const TrainOptions& options, const RunControl& control, bool writer, const ModelParameters& model,
           int start_step);

    // A line of its own, between progress updates.
    void say(const std::string& line);
    // The run's first lines: what it trains and how, or where it resumes.
    void announce(const TrainingState& state, int ranks);
    // After step `step` (1-based): the metrics line, code statistics and progress display.
    void step_done(int step, int start_step, const StepOutcome& outcome, double tokens_per_second, double elapsed,
                   const ModelParameters& model, int ranks);
    // Step `step` (1-based) was skipped, or diverged (then the run ends with an error).
    void step_skipped(int step, const StepOutcome& outcome);
    void step_diverged(int step, const StepOutcome& outcome);
    void evaluation(int step, const EvalResult& result);
    // A checkpoint after step `step`: written in the loop or handed to a background thread.
    void checkpoint(int step, bool background, double pause_seconds);
    // The end of a run that was not interrupted: the memory report by category (device: the
    // GPU step's, or null), then the checkpoint's path.
    void finish(int step, const TrainingState& state, int ranks, const DeviceStep* device,
                const std::string& checkpoint_path);
    // The end of an interrupted run: the status line closed.
    void interrupted();

private:
    const TrainOptions& options_;
    std::optional<MetricsLog> metrics_;         // rank 0
    std::optional<CodeDynamics> code_dynamics_; // rank 0, with --code-stats-every
    FILE* out_;  // progress output; null when quiet or not rank 0
    ProgressDisplay progress_;
};

}  // namespace dqt
