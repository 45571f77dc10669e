#pragma once
// Validation loss shared among the ranks of a data-parallel run (infer/evaluate.h on one).
#include <cstdint>

#include "data/shard.h"
#include "data_parallel/comm.h"
#include "infer/evaluate.h"

namespace dqt {

// evaluate's result (evaluate itself on a group of one), collective over comm: rank r scores windows r, r + N, ...; the window
// losses are summed in window order, so the result has the same bits on any number of ranks.
EvalResult evaluate_across_ranks(const InferenceModel& model, const Shard& shard, int window, int64_t max_tokens,
                                 Communicator& comm);

}  // namespace dqt
