#include "train/trainer.h"

#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <optional>


#include "core/error.h"
#include "core/memory.h"
#include "data/batch.h"
#include "data/dataset.h"
#include "data_parallel/comm.h"
#include "data_parallel/evaluate_ranks.h"
#include "io/folder_lock.h"
#include "model/llama.h"
#include "optim/schedule.h"
#include "train/device_step.h"
#include "train/memory_estimate.h"
#include "train/model_checkpoint.h"
#include "train/run_log.h"
#include "train/training_state.h"

namespace dqt {

namespace {

// Ctrl-C asks the loop to stop at the next step boundary with a checkpoint.
std::atomic<bool> g_stop_requested{false};
extern "C" void request_stop(int) { g_stop_requested.store(true); }

class InterruptGuard {
public:
    InterruptGuard() {
        g_stop_requested.store(false);
        previous_ = std::signal(SIGINT, request_stop);
    }
    ~InterruptGuard() { std::signal(SIGINT, previous_); }

    // A Ctrl-C since the last call: caught by the handler, or pending while SIGINT is blocked
    // (under mpirun, data_parallel/comm.cpp), then taken from the pending set.
    static bool requested() {
        if (g_stop_requested.load()) return true;
        sigset_t pending;
        if (sigpending(&pending) != 0 || sigismember(&pending, SIGINT) != 1) return false;
        sigset_t interrupt;
        sigemptyset(&interrupt);
        sigaddset(&interrupt, SIGINT);
        const timespec no_wait{0, 0};
        sigtimedwait(&interrupt, nullptr, &no_wait);
        g_stop_requested.store(true);
        return true;
    }

private:
    void (*previous_)(int) = SIG_DFL;
};

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point start) {
    return std::chrono::duration<double>(Clock::now() - start).count();
}

// Phase 1: the options the run trains with (the user's, or the checkpoint's on resume), its
// data, and every check that needs no allocation beyond the dataset.
struct RunSetup {
    TrainOptions options;
    Dataset data;
    std::optional<CheckpointRun> checkpoint;  // on resume
    bool finished = false;                    // resuming a run that already did all its steps
};

RunSetup settle_run(const TrainOptions& requested, const RunControl& control, const InitialModel& init,
                    const std::string& checkpoint_path) {
    std::optional<CheckpointRun> checkpoint;
    TrainOptions settled = requested;
    if (control.resume) {
        require(std::filesystem::exists(checkpoint_path),
                "cannot resume: no checkpoint at " + checkpoint_path + " (start the run without --resume)");
        checkpoint = read_checkpoint_run(checkpoint_path);
        settled = checkpoint->options;
        settled.out_dir = requested.out_dir;
        settled.device = requested.device;  // where this process runs: a run resumes on either device
        settled.recompute = requested.recompute;  // how this process holds activations, as device
    }
    RunSetup run{settled, open_dataset(settled.data_dir), std::move(checkpoint)};
    TrainOptions& options = run.options;
    const Dataset& data = run.data;
    if (options.model.vocab_size == 0) options.model.vocab_size = data.tokenizer->vocab_size();
    options.validate();
    const std::string fix = control.resume ? "resume with the dataset the run trained on"
                            : init.model   ? "prepare the data with the --init-from model's tokenizer"
                                           : "pass --vocab-size " + std::to_string(data.tokenizer->vocab_size());
    require(data.tokenizer->vocab_size() == options.model.vocab_size,
            "model vocab_size " + std::to_string(options.model.vocab_size) + " does not match the dataset's tokenizer (" +
                std::to_string(data.tokenizer->vocab_size()) + "): " + fix);
    if (init.model) {
        require(!control.resume, "--init-from starts a new run: a resumed run continues from its own checkpoint");
        require(same_tokenizer(*data.tokenizer, *init.tokenizer),
                "--init-from " + options.init_from + " was trained with another tokenizer than the dataset " +
                    options.data_dir + ": prepare the data with the model's tokenizer, or start from the seed");
    }
    if (run.checkpoint) {
        require(same_tokenizer(*data.tokenizer, *run.checkpoint->tokenizer),
                "cannot resume: the dataset " + options.data_dir +
                    " now uses a different tokenizer than the run trained with (was the folder replaced?)");
        // Nothing to train: the folder stays as it is (an end-of-run evaluation and memory
        // report again would duplicate the last lines of metrics.jsonl).
        run.finished = run.checkpoint->step >= options.steps;
        if (run.finished) return run;
    }
    require(data.train.token_count() > static_cast<size_t>(options.model.seq_len) + 1,
            "training split of " + options.data_dir + " is shorter than one sequence");
    // The evaluations at the end (and every --eval-every steps) need one window: checked here,
    // not after the training.
    const int seq = options.model.seq_len;
    require(options.eval_tokens >= seq, "--eval-tokens " + std::to_string(options.eval_tokens) +
                                            " is less than one evaluation window of " + std::to_string(seq) +
                                            " tokens (seq_len): pass at least " + std::to_string(seq));
    require(data.val.token_count() > static_cast<size_t>(seq),
            "the validation split of " + options.data_dir + " (" + std::to_string(data.val.token_count()) +
                " tokens) is shorter than one evaluation window of " + std::to_string(seq) +
                " + 1 tokens: give `dqt data` a larger --val-corpus or --val-fraction, or lower --seq-len");
    // Sizes checked against what can work before anything is allocated.
    require(options.tokens_per_step() <= static_cast<int64_t>(data.train.token_count()),
            "a step of " + std::to_string(options.tokens_per_step()) + " tokens (--batch x --grad-accum x seq_len) is " +
                "more than the whole training split of " + options.data_dir + " (" +
                std::to_string(data.train.token_count()) + " tokens): lower --batch or --grad-accum");
    require_training_fits_in_memory(options);
    const int ranks = world().size();
    require(options.grad_accum % ranks == 0,
            "--grad-accum " + std::to_string(options.grad_accum) + " cannot be shared by " + std::to_string(ranks) +
                " ranks: each rank runs whole micro-batches of --batch sequences, so --grad-accum must be a "
                "multiple of the rank count (the global batch is --batch x --grad-accum sequences)" +
                (control.resume ? std::string(": resume this run on a rank count that divides it") : ""));
    return run;
}

// Phase 2: rank 0 claims the run folder; every rank stops if it cannot (no rank may wait on it).
void claim_run_folder(const TrainOptions& options, const RunControl& control, const std::string& checkpoint_path,
                      Communicator& comm, std::optional<FolderLock>& folder_lock) {
    std::string refusal;
    if (comm.is_root()) {
        try {
            std::error_code error;
            std::filesystem::create_directories(options.out_dir, error);
            require(std::filesystem::is_directory(options.out_dir),
                    "cannot create output folder " + options.out_dir + ": " +
                        (error ? error.message() : std::string("a file of that name is in the way")));
            folder_lock.emplace(options.out_dir);
            if (!control.resume && !control.overwrite && std::filesystem::exists(checkpoint_path))
                refusal = options.out_dir + " already holds a run (" + checkpoint_path +
                          "): continue it with --resume, start it over with --overwrite, or choose another --out";
            // Starting over: the old run's checkpoint goes now, so a new run that fails before its
            // first checkpoint leaves none that its config.json does not describe.
            if (refusal.empty() && !control.resume && control.overwrite) std::filesystem::remove(checkpoint_path, error);
        } catch (const Error& error) {
            refusal = error.what();
        }
    }
    if (comm.any(!refusal.empty()))
        throw Error(comm.is_root() ? refusal : "rank 0 could not claim the run folder " + options.out_dir);
}

// --device cuda: the step's GPU half, checked before anything is written (no GPU is one line).
std::unique_ptr<DeviceStep> start_device(const TrainOptions& options, const RunControl& control, TrainingState& state,
                                         int ranks) {
    if (options.device != TrainDevice::cuda) return nullptr;
    require(ranks == 1, "--device cuda trains in one process: start it without mpirun");
    require(control.code_stats_every == 0, "--code-stats-every reads the weights between steps: not with --device cuda yet");
    std::unique_ptr<DeviceStep> device = make_cuda_step(state.model, state.optimizer, options);
    device->skip_nonfinite = control.on_nonfinite == RunControl::NonFinite::skip;
    return device;
}

// Phases 3 to 5: the model and its state built or loaded, the step loop, the end of the run.
// Every rank builds the same model; rank 0 alone writes files and prints (train/run_log.h).
class TrainingRun {
public:
    TrainingRun(RunSetup& setup, const RunControl& control, const std::string& checkpoint_path, InitialModel& init)
        : options_(setup.options),
          data_(setup.data),
          control_(control),
          checkpoint_path_(checkpoint_path),
          comm_(world()),
          state_(options_, *data_.tokenizer, checkpoint_path, control.resume, init.model.get(),
                 control.async_checkpoint, comm_),
          device_(start_device(options_, control, state_, comm_.size())),
          log_(options_, control, comm_.is_root(), state_.model, state_.position.step),
          schedule_{options_.lr, options_.warmup_steps, options_.steps, options_.min_lr_ratio} {
        if (init.model) {
            // The initial model is in the run's weights now: its copy goes, and the memory
            // report's peaks start without it (the OS's peak RSS still counts it).
            init = {};
            memory_reset_peaks();
        }
        state_.step->skip_nonfinite = control.on_nonfinite == RunControl::NonFinite::skip;
        require(!state_.step->skip_nonfinite || !options_.fused_update,
                "--on-nonfinite skip needs unfused updates: --fused-update changes the weights inside the backward "
                "pass, before the loss is known");
    }

    TrainReport train() {
        log_.announce(state_, comm_.size());
        std::optional<Activations> acts;  // on the host only when the step runs there
        if (!device_) acts.emplace(options_.model, options_.batch, options_.model.seq_len);
        InterruptGuard interrupt_guard;
        TrainReport report;
        const int start_step = state_.position.step;
        const auto start = Clock::now();
        int step = start_step;
        while (step < options_.steps) {
            const StepOutcome outcome = run_step(acts, step);
            ++step;
            if (outcome.result.skipped) ++report.skipped_steps;
            const double elapsed = seconds_since(start);
            const double tokens_per_second = static_cast<double>(step - start_step) * options_.tokens_per_step() / elapsed;
            log_.step_done(step, start_step, outcome, tokens_per_second, elapsed, state_.model, comm_.size());
            report.final_train_loss = outcome.loss;
            report.tokens_per_second = tokens_per_second;

            if (options_.eval_every > 0 && step % options_.eval_every == 0 && step < options_.steps) evaluate(step);
            // Every rank stops at the same step (a Ctrl-C may reach them at different moments).
            const bool stop_now = (control_.stop_after_step > 0 && step >= control_.stop_after_step) ||
                                  comm_.any(InterruptGuard::requested());
            if ((options_.checkpoint_every > 0 && step % options_.checkpoint_every == 0) || stop_now) save(step);
            if (stop_now && step < options_.steps) {
                state_.wait_for_checkpoint();
                log_.say("stopped after step " + std::to_string(step) + "; checkpoint saved to " + checkpoint_path_ +
                         " (continue with --resume)");
                log_.interrupted();
                report.steps_done = step;
                report.checkpoint_path = checkpoint_path_;
                return report;
            }
        }
        finish(step, report);
        report.steps_done = step;
        report.checkpoint_path = checkpoint_path_;
        return report;
    }

private:
    // Step `step` + 1: sample, forward, backward, update. A non-finite loss or gradient norm
    // that is not skipped ends the run before anything is saved.
    StepOutcome run_step(std::optional<Activations>& acts, int step) {
        const auto step_start = Clock::now();
        const int B = options_.batch, T = options_.model.seq_len;
        StepOutcome outcome;
        outcome.lr = schedule_.at(step);
        const float grad_scale = 1.0f / static_cast<float>(options_.tokens_per_step());
        auto sample = [&](int micro, int32_t* tokens, int32_t* targets) {
            sample_sequences(data_.train, options_.seed, static_cast<uint64_t>(step), static_cast<uint64_t>(micro) * B,
                             B, T, tokens, targets);
        };
        if (device_) {
            outcome.result = device_->run(grad_scale, outcome.lr, step + 1, sample);
            host_is_current_ = false;
        } else {
            outcome.result = state_.step->run(*acts, grad_scale, outcome.lr, step + 1, [&](int micro) {
                sample(micro, acts->tokens.data(), acts->targets.data());
            });
        }
        outcome.loss = outcome.result.loss_sum / static_cast<double>(options_.tokens_per_step());
        outcome.seconds = seconds_since(step_start);
        const TrainingStep::Result& result = outcome.result;
        const int done = step + 1;
        if (!result.skipped && !(std::isfinite(outcome.loss) && std::isfinite(result.grad_norm))) {
            // This step's weights are not saved: the last checkpoint stays the last good state.
            log_.step_diverged(done, outcome);
            const std::string last = std::filesystem::exists(checkpoint_path_)
                                         ? checkpoint_path_ + " is kept as it was"
                                         : "no checkpoint was written";
            throw Error("step " + std::to_string(done) + ": the loss or the gradient norm is not finite (loss " +
                        format_number(outcome.loss) + ", gradient norm " + format_number(result.grad_norm) +
                        "): the run diverged; " + last + ": lower --lr, or pass --on-nonfinite skip to skip such steps");
        }
        if (result.skipped) log_.step_skipped(done, outcome);
        return outcome;
    }

    // With the step on a device, the host's model and optimizer state are brought up to date
    // before anything reads them (evaluation, checkpoints), once per step that changed them.
    void pull_from_device() {
        if (!device_ || host_is_current_) return;
        device_->copy_to_host(state_.model, state_.optimizer);
        host_is_current_ = true;
    }

    EvalResult evaluate(int step) {
        pull_from_device();
        // Built anew from the current weights; fp32 tensors are read in place, not copied.
        const InferenceModel inference(state_.model, WeightSource::borrow);
        const EvalResult result = evaluate_across_ranks(inference, data_.val, options_.model.seq_len, options_.eval_tokens, comm_);
        log_.evaluation(step, result);
        return result;
    }

    // The step loop's pause for a checkpoint: the whole write, or with --async-checkpoint the
    // copy of the state that a background thread then writes.
    void save(int step) {
        const auto start = Clock::now();
        pull_from_device();
        state_.save(step);
        log_.checkpoint(step, control_.async_checkpoint, seconds_since(start));
    }

    // The end of a run that was not interrupted: evaluation, last checkpoint, memory report.
    void finish(int step, TrainReport& report) {
        const EvalResult result = evaluate(step);
        report.val_loss = result.loss;
        report.val_bits_per_byte = result.bits_per_byte;
        if (options_.checkpoint_every == 0 || step % options_.checkpoint_every != 0) save(step);
        state_.wait_for_checkpoint();
        log_.finish(step, state_, comm_.size(), device_.get(), checkpoint_path_);
    }

    const TrainOptions& options_;
    const Dataset& data_;
    const RunControl& control_;
    const std::string checkpoint_path_;
    Communicator& comm_;
    TrainingState state_;
    std::unique_ptr<DeviceStep> device_;  // --device cuda: the step runs there
    RunLog log_;
    const LrSchedule schedule_;
    bool host_is_current_ = true;  // the host's state equals the device's (pulled since the last step)
};

}  // namespace

std::string checkpoint_path_in(const std::string& out_dir) { return out_dir + "/checkpoint.dqt"; }
std::string metrics_path_in(const std::string& out_dir) { return out_dir + "/metrics.jsonl"; }

TrainReport run_training(const TrainOptions& requested, const RunControl& control, InitialModel init) {
    const std::string checkpoint_path = checkpoint_path_in(requested.out_dir);
    RunSetup setup = settle_run(requested, control, init, checkpoint_path);
    if (setup.finished) {
        if (world().is_root() && !control.quiet) {
            std::fprintf(stderr, "the run in %s already finished its %d steps: nothing to resume\n",
                         setup.options.out_dir.c_str(), setup.options.steps);
        }
        TrainReport finished;
        finished.steps_done = setup.checkpoint->step;
        finished.checkpoint_path = checkpoint_path;
        return finished;
    }
    std::optional<FolderLock> folder_lock;  // held until the run returns
    claim_run_folder(setup.options, control, checkpoint_path, world(), folder_lock);
    TrainingRun run(setup, control, checkpoint_path, init);
    return run.train();
}

}  // namespace dqt
