#include "infer/evaluate.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/error.h"
#include "data/batch.h"
#include "infer/session.h"
#include "kernels/cross_entropy.h"

namespace dqt {

namespace {

// Tokens of a window run at once: the forward's scratch is this many rows, whatever the window.
constexpr int kEvalChunkTokens = 128;

}  // namespace

EvalResult evaluate(const InferenceModel& model, const Shard& shard, int window, int64_t max_tokens,
                    Communicator& comm) {
    require(window > 0 && window <= model.config.seq_len,
            "evaluation windows of " + std::to_string(window) + " tokens do not fit the model's context of " +
                std::to_string(model.config.seq_len));
    const size_t windows = eval_window_count(shard, window, static_cast<size_t>(max_tokens));
    require(windows > 0, "validation split has too few tokens for one window of " + std::to_string(window) +
                             " tokens: use a larger corpus or a smaller --seq-len");
    const size_t ranks = static_cast<size_t>(comm.size()), rank = static_cast<size_t>(comm.rank());
    InferenceSession session(model, window);
    std::vector<int32_t> tokens(static_cast<size_t>(window)), targets(static_cast<size_t>(window));
    std::vector<double> losses;  // of this rank's windows
    for (size_t index = rank; index < windows; index += ranks) {
        eval_window(shard, index, window, tokens.data(), targets.data());
        session.reset();
        double loss = 0.0;
        for (int first = 0; first < window; first += kEvalChunkTokens) {
            const int count = std::min(kEvalChunkTokens, window - first);
            const float* logits = session.run(tokens.data() + first, count, LogitRows::all);
            loss += cross_entropy_forward_backward(nullptr, logits, targets.data() + first, count,
                                                   model.config.vocab_size, 0.0f);
        }
        losses.push_back(loss);
    }
    // Rank r's losses are those of windows r, r + N, ...: put them back in window order.
    std::vector<int> counts;
    for (size_t r = 0; r < ranks; ++r) counts.push_back(static_cast<int>((windows + ranks - 1 - r) / ranks));
    const std::vector<double> all = comm.allgather(losses, counts);
    std::vector<size_t> rank_start(ranks, 0);
    for (size_t r = 1; r < ranks; ++r) rank_start[r] = rank_start[r - 1] + static_cast<size_t>(counts[r - 1]);
    double loss_sum = 0.0;
    for (size_t index = 0; index < windows; ++index) loss_sum += all[rank_start[index % ranks] + index / ranks];
    EvalResult result;
    result.tokens = static_cast<int64_t>(windows) * window;
    result.loss = loss_sum / static_cast<double>(result.tokens);
    const double bytes_per_token = static_cast<double>(shard.source_bytes()) / static_cast<double>(shard.token_count());
    result.bits_per_byte = result.loss / std::log(2.0) / bytes_per_token;
    return result;
}

}  // namespace dqt
