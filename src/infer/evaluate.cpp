#include "infer/evaluate.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "core/error.h"
#include "data/eval_windows.h"
#include "infer/session.h"
#include "kernels/cross_entropy.h"

namespace dqt {

namespace {

// Tokens of a window run at once: the forward's scratch is this many rows, whatever the window.
constexpr int kEvalChunkTokens = 128;

}  // namespace

size_t evaluation_windows(const InferenceModel& model, const Shard& shard, int window, int64_t max_tokens) {
    require(window > 0 && window <= model.config.seq_len,
            "evaluation windows of " + std::to_string(window) + " tokens do not fit the model's context of " +
                std::to_string(model.config.seq_len));
    require(max_tokens <= 0 || max_tokens >= window,
            "--eval-tokens " + std::to_string(max_tokens) + " is less than one evaluation window of " +
                std::to_string(window) + " tokens (the model's context): pass at least " + std::to_string(window));
    const size_t windows = eval_window_count(shard, window, static_cast<size_t>(max_tokens));
    require(windows > 0, "the validation split (" + std::to_string(shard.token_count()) +
                             " tokens) is shorter than one evaluation window of " + std::to_string(window) +
                             " + 1 tokens (the model's context): use a larger validation corpus");
    return windows;
}

std::vector<double> window_losses(const InferenceModel& model, const Shard& shard, int window, size_t windows,
                                  size_t first, size_t stride, KvCacheType cache) {
    InferenceSession session(model, window, cache);
    std::vector<int32_t> tokens(static_cast<size_t>(window)), targets(static_cast<size_t>(window));
    std::vector<double> losses;
    for (size_t index = first; index < windows; index += stride) {
        eval_window(shard, index, window, tokens.data(), targets.data());
        session.reset();
        double loss = 0.0;
        for (int begin = 0; begin < window; begin += kEvalChunkTokens) {
            const int count = std::min(kEvalChunkTokens, window - begin);
            const float* logits = session.run(tokens.data() + begin, count, LogitRows::all);
            loss += cross_entropy_forward_backward(nullptr, logits, targets.data() + begin, count,
                                                   model.config.vocab_size, 0.0f);
        }
        losses.push_back(loss);
    }
    return losses;
}

EvalResult evaluation_result(const Shard& shard, int window, size_t windows, double loss_sum) {
    EvalResult result;
    result.tokens = static_cast<int64_t>(windows) * window;
    result.loss = loss_sum / static_cast<double>(result.tokens);
    const double bytes_per_token = static_cast<double>(shard.source_bytes()) / static_cast<double>(shard.token_count());
    result.bits_per_byte = result.loss / std::log(2.0) / bytes_per_token;
    return result;
}

EvalResult evaluate(const InferenceModel& model, const Shard& shard, int window, int64_t max_tokens,
                    KvCacheType cache) {
    const size_t windows = evaluation_windows(model, shard, window, max_tokens);
    double loss_sum = 0.0;
    for (const double loss : window_losses(model, shard, window, windows, 0, 1, cache)) loss_sum += loss;
    return evaluation_result(shard, window, windows, loss_sum);
}

}  // namespace dqt
