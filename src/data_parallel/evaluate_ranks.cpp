#include "data_parallel/evaluate_ranks.h"

#include <vector>

namespace dqt {

EvalResult evaluate_across_ranks(const InferenceModel& model, const Shard& shard, int window, int64_t max_tokens,
                                 Communicator& comm) {
    if (comm.size() == 1) return evaluate(model, shard, window, max_tokens);
    const size_t windows = evaluation_windows(model, shard, window, max_tokens);
    const size_t ranks = static_cast<size_t>(comm.size()), rank = static_cast<size_t>(comm.rank());
    const std::vector<double> losses = window_losses(model, shard, window, windows, rank, ranks);
    // Rank r's losses are those of windows r, r + N, ...: put them back in window order.
    std::vector<int> counts;
    for (size_t r = 0; r < ranks; ++r) counts.push_back(static_cast<int>((windows + ranks - 1 - r) / ranks));
    const std::vector<double> all = comm.allgather(losses, counts);
    std::vector<size_t> rank_start(ranks, 0);
    for (size_t r = 1; r < ranks; ++r) rank_start[r] = rank_start[r - 1] + static_cast<size_t>(counts[r - 1]);
    double loss_sum = 0.0;
    for (size_t index = 0; index < windows; ++index) loss_sum += all[rank_start[index % ranks] + index / ranks];
    return evaluation_result(shard, window, windows, loss_sum);
}

}  // namespace dqt
