#include "train/evaluate.h"

#include <cmath>
#include <vector>

#include "core/error.h"
#include "data/batch.h"

namespace dqt {

EvalResult evaluate(const ModelParameters& model, Activations& acts, const Shard& shard, int64_t max_tokens,
                    Communicator& comm) {
    const int B = acts.batch, T = acts.seq;
    const size_t windows = eval_window_count(shard, T, static_cast<size_t>(max_tokens));
    const size_t batches = windows / B;
    require(batches > 0, "validation split has too few tokens for one batch of " + std::to_string(B) + " x " +
                             std::to_string(T) + " tokens: use a larger corpus or a smaller --batch/--seq-len");
    const size_t ranks = static_cast<size_t>(comm.size()), rank = static_cast<size_t>(comm.rank());
    std::vector<double> losses;  // of this rank's batches
    for (size_t batch = rank; batch < batches; batch += ranks) {
        for (int b = 0; b < B; ++b) {
            eval_window(shard, batch * B + b, T, acts.tokens.data() + static_cast<size_t>(b) * T,
                        acts.targets.data() + static_cast<size_t>(b) * T);
        }
        losses.push_back(model_forward(model, acts, true));
    }
    // Rank r's losses are those of batches r, r + N, ...: put them back in batch order.
    std::vector<int> counts;
    for (size_t r = 0; r < ranks; ++r) counts.push_back(static_cast<int>((batches + ranks - 1 - r) / ranks));
    const std::vector<double> all = comm.allgather(losses, counts);
    std::vector<size_t> rank_start(ranks, 0);
    for (size_t r = 1; r < ranks; ++r) rank_start[r] = rank_start[r - 1] + static_cast<size_t>(counts[r - 1]);
    double loss_sum = 0.0;
    for (size_t batch = 0; batch < batches; ++batch) loss_sum += all[rank_start[batch % ranks] + batch / ranks];
    EvalResult result;
    result.tokens = static_cast<int64_t>(batches) * B * T;
    result.loss = loss_sum / static_cast<double>(result.tokens);
    const double bytes_per_token = static_cast<double>(shard.source_bytes()) / static_cast<double>(shard.token_count());
    result.bits_per_byte = result.loss / std::log(2.0) / bytes_per_token;
    return result;
}

}  // namespace dqt
