#include "train/run_log.h"

#include <nlohmann/json.hpp>

#include "core/parallel.h"
#include "data_parallel/compression.h"
#include "io/atomic_file.h"
#include "train/memory_report.h"

namespace dqt {

RunLog::RunLog(const TrainOptions& options, const RunControl& control, bool writer, const ModelParameters& model,
               int start_step)
    : options_(options),
      out_(control.quiet || !writer ? nullptr : stderr),
      progress_(out_ ? out_ : stderr, control.interactive, options.log_every) {
    if (!writer) return;
    if (!control.resume) write_file_atomic(options.out_dir + "/config.json", nlohmann::json(options).dump(2) + "\n");
    metrics_.emplace(metrics_path_in(options.out_dir), !control.resume, start_step);
    if (control.code_stats_every > 0) code_dynamics_.emplace(model, control.code_stats_every);
}

void RunLog::say(const std::string& line) {
    if (out_) progress_.message(line);
}

void RunLog::announce(const TrainingState& state, int ranks) {
    if (state.position.step > 0) {
        say("resuming " + options_.out_dir + " at step " + std::to_string(state.position.step) + "/" +
            std::to_string(options_.steps));
        if (!state.residual_note.empty()) say(state.residual_note);
        return;
    }
    say("training " + std::to_string(options_.model.parameter_count()) + " parameters with " +
        options_.method.label() + ", " + std::to_string(options_.tokens_per_step()) + " tokens/step, " +
        std::to_string(options_.steps) + " steps -> " + options_.out_dir);
    if (!options_.init_from.empty()) say("starting from the weights of " + options_.init_from);
    const std::string sharding =
        ranks > 1 ? ", rank 0's share of a state split over " + std::to_string(ranks) + " ranks" : "";
    say(state.optimizer.describe(state.model.layout) + sharding +
        (options_.fused_update ? "; fused updates (clipping with the previous step's norm)" : ""));
    if (ranks > 1) {
        const CommCompression& compression = options_.compression;
        say("data parallel over " + std::to_string(ranks) + " ranks: each runs " +
            std::to_string(options_.grad_accum / ranks) + " micro-batch(es) of " + std::to_string(options_.batch) +
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

void RunLog::step_done(int step, int start_step, const StepOutcome& outcome, double tokens_per_second,
                       double elapsed, const ModelParameters& model, int ranks) {
    const TrainingStep::Result& result = outcome.result;
    if (step == start_step + 1 && ranks > 1) {
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
                          {"ranks", ranks}, {"gradient_bytes_sent", result.gradient_bytes},
                          {"weight_bytes_sent", result.weight_bytes}, {"other_bytes_sent", result.other_bytes},
                          {"exchange_wait_seconds", result.exchange_wait_seconds}});
    }
    nlohmann::json code_record;
    if (code_dynamics_ && code_dynamics_->after_step(model, step, code_record) && metrics_) metrics_->append(code_record);
    if (out_) {
        progress_.update({step, options_.steps, outcome.loss, tokens_per_second, outcome.lr,
                          (options_.steps - step) * elapsed / (step - start_step)});
    }
}

void RunLog::step_skipped(int step, const StepOutcome& outcome) {
    if (metrics_) {
        metrics_->append(
            {{"type", "skipped"}, {"step", step}, {"loss", outcome.loss}, {"grad_norm", outcome.result.grad_norm}});
    }
    say("step " + std::to_string(step) + ": non-finite loss or gradient, step skipped (no update)");
}

void RunLog::step_diverged(int step, const StepOutcome& outcome) {
    if (metrics_) {
        metrics_->append(
            {{"type", "diverged"}, {"step", step}, {"loss", outcome.loss}, {"grad_norm", outcome.result.grad_norm}});
    }
}

void RunLog::evaluation(int step, const EvalResult& result) {
    if (metrics_) {
        metrics_->append({{"type", "eval"}, {"step", step}, {"val_loss", result.loss},
                          {"val_bits_per_byte", result.bits_per_byte}, {"val_tokens", result.tokens}});
    }
    char line[160];
    std::snprintf(line, sizeof line, "eval step %d: val loss %.4f nats/token, %.4f bits/byte", step, result.loss,
                  result.bits_per_byte);
    say(line);
}

void RunLog::checkpoint(int step, bool background, double pause_seconds) {
    if (!metrics_) return;
    metrics_->append({{"type", "checkpoint"},
                      {"step", step},
                      {"write", background ? "background" : "in the loop"},
                      {"pause_seconds", pause_seconds}});
}

void RunLog::finish(int step, const TrainingState& state, int ranks, const DeviceStep* device,
                    const std::string& checkpoint_path) {
    const int64_t parameters = options_.model.parameter_count();
    nlohmann::json memory = memory_report_json(parameters);  // of rank 0's process
    memory["step"] = step;
    memory["optimizer_state"] = state.optimizer.describe(state.model.layout);
    memory["fused_update"] = options_.fused_update;
    memory["threads"] = num_threads();  // per rank; tokens/s depends on it, the losses do not
    memory["ranks"] = ranks;
    if (device) memory["device"] = device->memory_json();
    if (metrics_) metrics_->append(memory);
    if (!out_) return;
    progress_.finish();
    std::fprintf(out_, "%s", memory_report_text(parameters).c_str());
    if (device) std::fprintf(out_, "%s", device_memory_text(device->memory_json()).c_str());
    std::fprintf(out_, "checkpoint: %s\n", checkpoint_path.c_str());
}

void RunLog::interrupted() {
    if (out_) progress_.finish();
}

}  // namespace dqt
