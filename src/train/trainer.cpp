#include "train/trainer.h"

#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <optional>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/memory.h"
#include "core/parallel.h"
#include "data/batch.h"
#include "data/dataset.h"
#include "data_parallel/comm.h"
#include "data_parallel/evaluate_ranks.h"
#include "io/atomic_file.h"
#include "io/folder_lock.h"
#include "model/llama.h"
#include "optim/schedule.h"
#include "train/memory_report.h"
#include "train/code_dynamics.h"
#include "train/device_step.h"
#include "train/memory_estimate.h"
#include "train/metrics_log.h"
#include "train/model_checkpoint.h"
#include "train/progress.h"
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
    require(data.tokenizer->vocab_size() == options.model.vocab_size,
            "model vocab_size " + std::to_string(options.model.vocab_size) + " does not match the dataset's tokenizer (" +
                std::to_string(data.tokenizer->vocab_size()) + "): pass --vocab-size " +
                std::to_string(data.tokenizer->vocab_size()));
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
    // Sizes checked against what can work before anything is allocated.
    require(options.tokens_per_step() <= static_cast<int64_t>(data.train.token_count()),
            "a step of " + std::to_string(options.tokens_per_step()) + " tokens (--batch x --grad-accum x seq_len) is " +
                "more than the whole training split of " + options.data_dir + " (" +
                std::to_string(data.train.token_count()) + " tokens): lower --batch or --grad-accum");
    const double needed_gib = training_memory_lower_bound(options) / (1 << 30);
    const double machine_gib = static_cast<double>(physical_memory_bytes()) / (1 << 30);
    require(needed_gib <= machine_gib,
            "training this model (" + std::to_string(options.model.parameter_count()) + " parameters, " +
                std::to_string(static_cast<int64_t>(options.batch) * options.model.seq_len) +
                " tokens per micro-batch) needs at least " + format_number(needed_gib) +
                " GiB for its weights, gradients, Adam state and logits, more than this machine's " +
                format_number(machine_gib) + " GiB of memory");
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
            std::error_code ignored;
            std::filesystem::create_directories(options.out_dir, ignored);
            require(std::filesystem::is_directory(options.out_dir), "cannot create output folder " + options.out_dir);
            folder_lock.emplace(options.out_dir);
            if (!control.resume && !control.overwrite && std::filesystem::exists(checkpoint_path))
                refusal = options.out_dir + " already holds a run (" + checkpoint_path +
                          "): continue it with --resume, start it over with --overwrite, or choose another --out";
        } catch (const Error& error) {
            refusal = error.what();
        }
    }
    if (comm.any(!refusal.empty()))
        throw Error(comm.is_root() ? refusal : "rank 0 could not claim the run folder " + options.out_dir);
}

// Phases 3 to 5: the model and its state built or loaded, the step loop, the end of the run.
// Every rank builds the same model; rank 0 alone writes files and prints.
class TrainingRun {
public:
    TrainingRun(RunSetup& setup, const RunControl& control, const std::string& checkpoint_path, InitialModel& init)
        : options_(setup.options),
          data_(setup.data),
          control_(control),
          checkpoint_path_(checkpoint_path),
          comm_(world()),
          writer_(comm_.is_root()),
          ranks_(comm_.size()),
          state_(options_, *data_.tokenizer, checkpoint_path, control.resume, init.model.get(),
                 control.async_checkpoint, comm_),
          schedule_{options_.lr, options_.warmup_steps, options_.steps, options_.min_lr_ratio},
          out_(control.quiet || !writer_ ? nullptr : stderr),
          progress_(out_ ? out_ : stderr, control.interactive, options_.log_every) {
        if (init.model) {
            // The initial model is in the run's weights now: its copy goes, and the memory
            // report's peaks start without it (the OS's peak RSS still counts it).
            init = {};
            memory_reset_peaks();
        }
        if (options_.device == TrainDevice::cuda) {  // before anything is written: no GPU is one line
            require(ranks_ == 1, "--device cuda trains in one process: start it without mpirun");
            require(control.code_stats_every == 0,
                    "--code-stats-every reads the weights between steps: not with --device cuda yet");
            device_ = make_cuda_step(state_.model, state_.optimizer, options_);
            device_->skip_nonfinite = control.on_nonfinite == RunControl::NonFinite::skip;
        }
        if (!control.resume && writer_)
            write_file_atomic(options_.out_dir + "/config.json", nlohmann::json(options_).dump(2) + "\n");
        if (writer_) metrics_.emplace(metrics_path_in(options_.out_dir), !control.resume, state_.position.step);
        if (control.code_stats_every > 0 && writer_) code_dynamics_.emplace(state_.model, control.code_stats_every);
        state_.step->skip_nonfinite = control.on_nonfinite == RunControl::NonFinite::skip;
        require(!state_.step->skip_nonfinite || !options_.fused_update,
                "--on-nonfinite skip needs unfused updates: --fused-update changes the weights inside the backward "
                "pass, before the loss is known");
    }

    TrainReport train() {
        announce();
        std::optional<Activations> acts;  // on the host only when the step runs there
        if (!device_) acts.emplace(options_.model, options_.batch, options_.model.seq_len);
        InterruptGuard interrupt_guard;
        TrainReport report;
        const int start_step = state_.position.step;
        const auto start = Clock::now();
        int step = start_step;
        bool interrupted = false;
        while (step < options_.steps) {
            const StepOutcome outcome = run_step(acts, step);
            ++step;
            if (outcome.result.skipped) ++report.skipped_steps;
            const double elapsed = seconds_since(start);
            const double tokens_per_second = static_cast<double>(step - start_step) * options_.tokens_per_step() / elapsed;
            log_step(step, start_step, outcome, tokens_per_second, elapsed);
            report.final_train_loss = outcome.loss;
            report.tokens_per_second = tokens_per_second;

            if (options_.eval_every > 0 && step % options_.eval_every == 0 && step < options_.steps) evaluate(step);
            // Every rank stops at the same step (a Ctrl-C may reach them at different moments).
            const bool stop_now = (control_.stop_after_step > 0 && step >= control_.stop_after_step) ||
                                  comm_.any(InterruptGuard::requested());
            if ((options_.checkpoint_every > 0 && step % options_.checkpoint_every == 0) || stop_now) save(step);
            if (stop_now && step < options_.steps) {
                interrupted = true;
                state_.wait_for_checkpoint();
                say("stopped after step " + std::to_string(step) + "; checkpoint saved to " + checkpoint_path_ +
                    " (continue with --resume)");
                break;
            }
        }
        report.steps_done = step;
        report.checkpoint_path = checkpoint_path_;
        if (interrupted) {
            if (out_) progress_.finish();
        } else {
            finish(step, report);
        }
        return report;
    }

private:
    struct StepOutcome {
        TrainingStep::Result result;
        double loss = 0.0;  // nats/token
        float lr = 0.0f;
        double seconds = 0.0;
    };

    void say(const std::string& line) {
        if (out_) progress_.message(line);
    }

    void announce() {
        if (state_.position.step > 0) {
            say("resuming " + options_.out_dir + " at step " + std::to_string(state_.position.step) + "/" +
                std::to_string(options_.steps));
            if (!state_.residual_note.empty()) say(state_.residual_note);
            return;
        }
        say("training " + std::to_string(options_.model.parameter_count()) + " parameters with " +
            options_.method.label() + ", " + std::to_string(options_.tokens_per_step()) + " tokens/step, " +
            std::to_string(options_.steps) + " steps -> " + options_.out_dir);
        if (!options_.init_from.empty()) say("starting from the weights of " + options_.init_from);
        const std::string sharding =
            ranks_ > 1 ? ", rank 0's share of a state split over " + std::to_string(ranks_) + " ranks" : "";
        say(state_.optimizer.describe(state_.model.layout) + sharding +
            (options_.fused_update ? "; fused updates (clipping with the previous step's norm)" : ""));
        if (ranks_ > 1) {
            const CommCompression& compression = options_.compression;
            say("data parallel over " + std::to_string(ranks_) + " ranks: each runs " +
                std::to_string(options_.grad_accum / ranks_) + " micro-batch(es) of " + std::to_string(options_.batch) +
                " sequences per step; gradients reduce-scattered (" + compression_label(compression.gradient_bits) +
                (compression.gradient_bits ? ", error feedback" : "") + "), new weights all-gathered (" +
                (compression.weight_bits ? compression_label(compression.weight_bits) + " differences of the fp32 values"
                                         : std::string("as stored")) +
                ")");
        } else if (options_.compression.any()) {
            say("--compress-gradients and --compress-weights act between ranks: one rank sends nothing, so they "
                "change nothing here");
        }
    }

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
            if (metrics_) {
                metrics_->append(
                    {{"type", "diverged"}, {"step", done}, {"loss", outcome.loss}, {"grad_norm", result.grad_norm}});
            }
            const std::string last = std::filesystem::exists(checkpoint_path_)
                                         ? checkpoint_path_ + " is kept as it was"
                                         : "no checkpoint was written";
            throw Error("step " + std::to_string(done) + ": the loss or the gradient norm is not finite (loss " +
                        format_number(outcome.loss) + ", gradient norm " + format_number(result.grad_norm) +
                        "): the run diverged; " + last + ": lower --lr, or pass --on-nonfinite skip to skip such steps");
        }
        if (result.skipped) {
            if (metrics_) {
                metrics_->append(
                    {{"type", "skipped"}, {"step", done}, {"loss", outcome.loss}, {"grad_norm", result.grad_norm}});
            }
            say("step " + std::to_string(done) + ": non-finite loss or gradient, step skipped (no update)");
        }
        return outcome;
    }

    // The metrics line, code statistics and progress display after step `step`.
    void log_step(int step, int start_step, const StepOutcome& outcome, double tokens_per_second, double elapsed) {
        const TrainingStep::Result& result = outcome.result;
        if (step == start_step + 1 && ranks_ > 1) {
            char line[200];
            std::snprintf(line, sizeof line,
                          "sent per step by rank 0: %.2f MB of gradients (reduce-scatter), %.2f MB of weights "
                          "(all-gather)",
                          result.gradient_bytes / 1e6, result.weight_bytes / 1e6);
            say(line);
        }
        if (metrics_ && (step % options_.log_every == 0 || step == options_.steps)) {
            metrics_->append({{"type", "train"}, {"step", step}, {"loss", outcome.loss}, {"lr", outcome.lr},
                              {"grad_norm", result.grad_norm},
                              {"tokens", static_cast<int64_t>(step) * options_.tokens_per_step()},
                              {"step_seconds", outcome.seconds}, {"tokens_per_second", tokens_per_second},
                              {"ranks", ranks_}, {"gradient_bytes_sent", result.gradient_bytes},
                              {"weight_bytes_sent", result.weight_bytes}, {"other_bytes_sent", result.other_bytes},
                              {"exchange_wait_seconds", result.exchange_wait_seconds}});
        }
        nlohmann::json code_record;
        if (code_dynamics_ && code_dynamics_->after_step(state_.model, step, code_record) && metrics_)
            metrics_->append(code_record);
        if (out_) {
            progress_.update({step, options_.steps, outcome.loss, tokens_per_second, outcome.lr,
                              (options_.steps - step) * elapsed / (step - start_step)});
        }
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
        if (metrics_) {
            metrics_->append({{"type", "eval"}, {"step", step}, {"val_loss", result.loss},
                              {"val_bits_per_byte", result.bits_per_byte}, {"val_tokens", result.tokens}});
        }
        char line[160];
        std::snprintf(line, sizeof line, "eval step %d: val loss %.4f nats/token, %.4f bits/byte", step, result.loss,
                      result.bits_per_byte);
        say(line);
        return result;
    }

    // The step loop's pause for a checkpoint: the whole write, or with --async-checkpoint the
    // copy of the state that a background thread then writes (metrics.jsonl: "checkpoint").
    void save(int step) {
        const auto start = Clock::now();
        pull_from_device();
        state_.save(step);
        if (metrics_) {
            metrics_->append({{"type", "checkpoint"},
                              {"step", step},
                              {"write", control_.async_checkpoint ? "background" : "in the loop"},
                              {"pause_seconds", seconds_since(start)}});
        }
    }

    // The end of a run that was not interrupted: evaluation, last checkpoint, memory report.
    void finish(int step, TrainReport& report) {
        const EvalResult result = evaluate(step);
        report.val_loss = result.loss;
        report.val_bits_per_byte = result.bits_per_byte;
        if (options_.checkpoint_every == 0 || step % options_.checkpoint_every != 0) save(step);
        state_.wait_for_checkpoint();
        const int64_t parameters = options_.model.parameter_count();
        nlohmann::json memory = memory_report_json(parameters);  // of rank 0's process
        memory["step"] = step;
        memory["optimizer_state"] = state_.optimizer.describe(state_.model.layout);
        memory["fused_update"] = options_.fused_update;
        memory["threads"] = num_threads();  // per rank; tokens/s depends on it, the losses do not
        memory["ranks"] = ranks_;
        if (device_) memory["device"] = device_->memory_json();
        if (metrics_) metrics_->append(memory);
        if (out_) {
            progress_.finish();
            std::fprintf(out_, "%s", memory_report_text(parameters).c_str());
            if (device_) std::fprintf(out_, "%s", device_memory_text(device_->memory_json()).c_str());
            std::fprintf(out_, "checkpoint: %s\n", checkpoint_path_.c_str());
        }
    }

    const TrainOptions& options_;
    const Dataset& data_;
    const RunControl& control_;
    const std::string checkpoint_path_;
    Communicator& comm_;
    const bool writer_;  // rank 0: writes files and prints
    const int ranks_;
    TrainingState state_;
    const LrSchedule schedule_;
    std::optional<MetricsLog> metrics_;
    std::optional<CodeDynamics> code_dynamics_;
    std::unique_ptr<DeviceStep> device_;  // --device cuda: the step runs there
    bool host_is_current_ = true;         // the host's state equals the device's (pulled since the last step)
    FILE* out_;  // progress output; null when quiet or not rank 0
    ProgressDisplay progress_;
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
