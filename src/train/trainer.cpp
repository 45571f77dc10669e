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
#include "dist/comm.h"
#include "dist/shard_plan.h"
#include "dist/sharded_state.h"
#include "infer/evaluate.h"
#include "io/atomic_file.h"
#include "io/folder_lock.h"
#include "model/llama.h"
#include "optim/schedule.h"
#include "train/memory_report.h"
#include "train/code_dynamics.h"
#include "train/metrics_log.h"
#include "train/model_checkpoint.h"
#include "train/progress.h"
#include "train/training_step.h"

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
    // (under mpirun, dist/comm.cpp), then taken from the pending set.
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

}  // namespace

std::string checkpoint_path_in(const std::string& out_dir) { return out_dir + "/checkpoint.dqt"; }
std::string metrics_path_in(const std::string& out_dir) { return out_dir + "/metrics.jsonl"; }

TrainReport run_training(const TrainOptions& requested, const RunControl& control) {
    TrainOptions options = requested;
    const std::string checkpoint_path = checkpoint_path_in(options.out_dir);
    std::optional<CheckpointRun> checkpoint_run;
    if (control.resume) {
        require(std::filesystem::exists(checkpoint_path),
                "cannot resume: no checkpoint at " + checkpoint_path + " (start the run without --resume)");
        checkpoint_run = read_checkpoint_run(checkpoint_path);
        options = checkpoint_run->options;
        options.out_dir = requested.out_dir;
    }
    Dataset data = open_dataset(options.data_dir);
    if (options.model.vocab_size == 0) options.model.vocab_size = data.tokenizer->vocab_size();
    options.validate();
    require(data.tokenizer->vocab_size() == options.model.vocab_size,
            "model vocab_size " + std::to_string(options.model.vocab_size) + " does not match the dataset's tokenizer (" +
                std::to_string(data.tokenizer->vocab_size()) + "): pass --vocab-size " +
                std::to_string(data.tokenizer->vocab_size()));
    if (checkpoint_run) {
        require(same_tokenizer(*data.tokenizer, *checkpoint_run->tokenizer),
                "cannot resume: the dataset " + options.data_dir +
                    " now uses a different tokenizer than the run trained with (was the folder replaced?)");
        if (checkpoint_run->step >= options.steps) {
            // Nothing to train: leave the folder as it is (an end-of-run evaluation and memory
            // report again would duplicate the last lines of metrics.jsonl).
            if (world().is_root() && !control.quiet) {
                std::fprintf(stderr, "the run in %s already finished its %d steps: nothing to resume\n",
                             options.out_dir.c_str(), options.steps);
            }
            TrainReport finished;
            finished.steps_done = checkpoint_run->step;
            finished.checkpoint_path = checkpoint_path;
            return finished;
        }
    }
    require(data.train.token_count() > static_cast<size_t>(options.model.seq_len) + 1,
            "training split of " + options.data_dir + " is shorter than one sequence");
    // Sizes checked against what can work before anything is allocated.
    require(options.tokens_per_step() <= static_cast<int64_t>(data.train.token_count()),
            "a step of " + std::to_string(options.tokens_per_step()) + " tokens (--batch x --grad-accum x seq_len) is " +
                "more than the whole training split of " + options.data_dir + " (" +
                std::to_string(data.train.token_count()) + " tokens): lower --batch or --grad-accum");
    const double weight_gib = 4.0 * static_cast<double>(options.model.parameter_count()) / (1 << 30);
    const double machine_gib = static_cast<double>(physical_memory_bytes()) / (1 << 30);
    require(weight_gib <= machine_gib, "the model has " + std::to_string(options.model.parameter_count()) +
                                           " parameters, " + std::to_string(static_cast<int64_t>(weight_gib)) +
                                           " GiB in fp32 alone, more than this machine's " +
                                           std::to_string(static_cast<int64_t>(machine_gib)) + " GiB of memory");

    // Data parallel: every rank builds the same model; rank 0 alone writes files and prints.
    Communicator& comm = world();
    const bool writer = comm.is_root();
    const int ranks = comm.size();
    require(options.grad_accum % ranks == 0,
            "--grad-accum " + std::to_string(options.grad_accum) + " cannot be shared by " + std::to_string(ranks) +
                " ranks: each rank runs whole micro-batches of --batch sequences, so --grad-accum must be a "
                "multiple of the rank count (the global batch is --batch x --grad-accum sequences)" +
                (control.resume ? std::string(": resume this run on a rank count that divides it") : ""));
    // Rank 0 claims the run folder; every rank stops if it cannot (no rank may wait on it).
    std::optional<FolderLock> folder_lock;
    std::string refusal;
    if (writer) {
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
        throw Error(writer ? refusal : "rank 0 could not claim the run folder " + options.out_dir);

    ModelParameters model(options.model, options.method);
    const ShardPlan plan = make_shard_plan(model.layout, options.method.grid, ranks);
    OptimizerState adam(model.layout, options.optim_state, plan.owned_by(model.layout, comm.rank()));
    TrainingPosition position;
    if (control.resume) {
        position = load_training_state(checkpoint_path, model, adam);
    } else {
        model.initialize(options.seed);
        if (writer) write_file_atomic(options.out_dir + "/config.json", nlohmann::json(options).dump(2) + "\n");
    }
    const int start_step = position.step;
    std::optional<MetricsLog> metrics;
    if (writer) metrics.emplace(metrics_path_in(options.out_dir), !control.resume, start_step);
    std::optional<CodeDynamics> code_dynamics;
    if (control.code_stats_every > 0 && writer) code_dynamics.emplace(model, control.code_stats_every);
    TrainingStep training_step(model, adam, options.adam, options.grad_clip, options.fused_update, options.seed,
                               options.grad_accum, comm, plan);
    training_step.previous_grad_norm = position.previous_grad_norm;
    training_step.skip_nonfinite = control.on_nonfinite == RunControl::NonFinite::skip;
    require(!training_step.skip_nonfinite || !options.fused_update,
            "--on-nonfinite skip needs unfused updates: --fused-update changes the weights inside the backward "
            "pass, before the loss is known");

    const int B = options.batch, T = options.model.seq_len;
    Activations acts(options.model, B, T);
    const LrSchedule schedule{options.lr, options.warmup_steps, options.steps, options.min_lr_ratio};
    const float grad_scale = 1.0f / static_cast<float>(options.tokens_per_step());
    const int64_t parameters = options.model.parameter_count();

    FILE* out = control.quiet || !writer ? nullptr : stderr;
    ProgressDisplay progress(out ? out : stderr, control.interactive, options.log_every);
    auto say = [&](const std::string& line) {
        if (out) progress.message(line);
    };
    if (start_step == 0) {
        say("training " + std::to_string(parameters) + " parameters with " + options.method.label() + ", " +
            std::to_string(options.tokens_per_step()) + " tokens/step, " + std::to_string(options.steps) +
            " steps -> " + options.out_dir);
        const std::string sharding =
            ranks > 1 ? ", rank 0's share of a state split over " + std::to_string(ranks) + " ranks" : "";
        say(adam.describe(model.layout) + sharding +
            (options.fused_update ? "; fused updates (clipping with the previous step's norm)" : ""));
        if (ranks > 1) {
            say("data parallel over " + std::to_string(ranks) + " ranks: each runs " +
                std::to_string(options.grad_accum / ranks) + " micro-batch(es) of " + std::to_string(B) +
                " sequences per step; gradients reduce-scattered, new weights all-gathered");
        }
    } else {
        say("resuming " + options.out_dir + " at step " + std::to_string(start_step) + "/" +
            std::to_string(options.steps));
    }

    auto run_eval = [&](int step) {
        // Built anew from the current weights; fp32 tensors are read in place, not copied.
        const InferenceModel inference(model, WeightSource::borrow);
        const EvalResult result = evaluate(inference, data.val, T, options.eval_tokens, comm);
        if (metrics) {
            metrics->append({{"type", "eval"}, {"step", step}, {"val_loss", result.loss},
                             {"val_bits_per_byte", result.bits_per_byte}, {"val_tokens", result.tokens}});
        }
        char line[160];
        std::snprintf(line, sizeof line, "eval step %d: val loss %.4f nats/token, %.4f bits/byte", step, result.loss,
                      result.bits_per_byte);
        say(line);
        return result;
    };
    auto save = [&](int step) {
        const TrainingPosition here{step, training_step.previous_grad_norm};
        if (ranks == 1) {
            save_training_checkpoint(checkpoint_path, options, here, model, adam, *data.tokenizer);
            return;
        }
        // The whole optimizer state, so that any number of ranks can resume.
        const std::optional<OptimizerState> whole = gather_optimizer_state(model.layout, plan, comm, adam);
        if (writer) save_training_checkpoint(checkpoint_path, options, here, model, *whole, *data.tokenizer);
    };

    InterruptGuard interrupt_guard;
    TrainReport report;
    const auto start = Clock::now();
    int64_t tokens_this_session = 0;
    int step = start_step;
    bool interrupted = false;
    while (step < options.steps) {
        const auto step_start = Clock::now();
        const float lr = schedule.at(step);
        const TrainingStep::Result result =
            training_step.run(acts, grad_scale, lr, step + 1, [&](int micro) {
                sample_sequences(data.train, options.seed, static_cast<uint64_t>(step),
                                 static_cast<uint64_t>(micro) * B, B, T, acts.tokens.data(), acts.targets.data());
            });
        const double loss = result.loss_sum / static_cast<double>(options.tokens_per_step());
        ++step;
        if (!result.skipped && !(std::isfinite(loss) && std::isfinite(result.grad_norm))) {
            // This step's weights are not saved: the last checkpoint stays the last good state.
            if (metrics) metrics->append({{"type", "diverged"}, {"step", step}, {"loss", loss}, {"grad_norm", result.grad_norm}});
            const std::string last = std::filesystem::exists(checkpoint_path)
                                         ? checkpoint_path + " is kept as it was"
                                         : "no checkpoint was written";
            throw Error("step " + std::to_string(step) + ": the loss or the gradient norm is not finite (loss " +
                        std::to_string(loss) + ", gradient norm " + std::to_string(result.grad_norm) +
                        "): the run diverged; " + last + ": lower --lr, or pass --on-nonfinite skip to skip such steps");
        }
        if (result.skipped) {
            ++report.skipped_steps;
            if (metrics) metrics->append({{"type", "skipped"}, {"step", step}, {"loss", loss}, {"grad_norm", result.grad_norm}});
            say("step " + std::to_string(step) + ": non-finite loss or gradient, step skipped (no update)");
        }
        tokens_this_session += options.tokens_per_step();

        const double elapsed = seconds_since(start);
        const double tokens_per_second = tokens_this_session / elapsed;
        if (step == start_step + 1 && ranks > 1) {
            char line[200];
            std::snprintf(line, sizeof line,
                          "sent per step by rank 0: %.2f MB of gradients (reduce-scatter), %.2f MB of weights "
                          "(all-gather)",
                          result.gradient_bytes / 1e6, result.weight_bytes / 1e6);
            say(line);
        }
        if (metrics && (step % options.log_every == 0 || step == options.steps)) {
            metrics->append({{"type", "train"}, {"step", step}, {"loss", loss}, {"lr", lr},
                             {"grad_norm", result.grad_norm},
                             {"tokens", static_cast<int64_t>(step) * options.tokens_per_step()},
                             {"step_seconds", seconds_since(step_start)}, {"tokens_per_second", tokens_per_second},
                             {"ranks", ranks}, {"gradient_bytes_sent", result.gradient_bytes},
                             {"weight_bytes_sent", result.weight_bytes}, {"other_bytes_sent", result.other_bytes},
                             {"exchange_wait_seconds", result.exchange_wait_seconds}});
        }
        nlohmann::json code_record;
        if (code_dynamics && code_dynamics->after_step(model, step, code_record) && metrics) metrics->append(code_record);
        if (out) {
            progress.update({step, options.steps, loss, tokens_per_second, lr,
                             (options.steps - step) * elapsed / (step - start_step)});
        }
        report.final_train_loss = loss;
        report.tokens_per_second = tokens_per_second;

        if (options.eval_every > 0 && step % options.eval_every == 0 && step < options.steps) run_eval(step);
        // Every rank stops at the same step (a Ctrl-C may reach them at different moments).
        const bool stop_now = (control.stop_after_step > 0 && step >= control.stop_after_step) ||
                              comm.any(InterruptGuard::requested());
        if ((options.checkpoint_every > 0 && step % options.checkpoint_every == 0) || stop_now) save(step);
        if (stop_now && step < options.steps) {
            interrupted = true;
            say("stopped after step " + std::to_string(step) + "; checkpoint saved to " + checkpoint_path +
                " (continue with --resume)");
            break;
        }
    }

    report.steps_done = step;
    report.checkpoint_path = checkpoint_path;
    if (!interrupted) {
        const EvalResult result = run_eval(step);
        report.val_loss = result.loss;
        report.val_bits_per_byte = result.bits_per_byte;
        if (options.checkpoint_every == 0 || step % options.checkpoint_every != 0) save(step);
        nlohmann::json memory = memory_report_json(parameters);  // of rank 0's process
        memory["step"] = step;
        memory["optimizer_state"] = adam.describe(model.layout);
        memory["fused_update"] = options.fused_update;
        memory["threads"] = num_threads();  // per rank; tokens/s depends on it, the losses do not
        memory["ranks"] = ranks;
        if (metrics) metrics->append(memory);
        if (out) {
            progress.finish();
            std::fprintf(out, "%s", memory_report_text(parameters).c_str());
            std::fprintf(out, "checkpoint: %s\n", checkpoint_path.c_str());
        }
    } else if (out) {
        progress.finish();
    }
    return report;
}

}  // namespace dqt
