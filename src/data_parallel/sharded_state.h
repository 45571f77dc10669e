#pragma once
// Checkpoints of a sharded optimizer state hold the whole state, so that a run saved by N
// ranks resumes on M: rank 0 assembles it from every rank's shard before writing, and each
// resuming rank reads back only its slice (train/model_checkpoint.h).
#include <optional>
#include <vector>

#include "core/memory.h"
#include "data_parallel/comm.h"
#include "data_parallel/shard_plan.h"
#include "optim/optimizer_state.h"

namespace dqt {

// Collective: every rank calls it. Rank 0 gets the whole state (category scratch: it lives
// while the checkpoint is written); the others get nothing.
std::optional<OptimizerState> gather_optimizer_state(const ParamLayout& layout, const ShardPlan& plan,
                                                     Communicator& comm, const OptimizerState& shard);

// Collective: rank r's `mine` holds floats [cut[r], cut[r+1]) of one array; rank 0 gets the
// whole array (category scratch), the others an empty one.
Array<float> gather_float_shards(Communicator& comm, const Array<float>& mine, const std::vector<size_t>& cut);

}  // namespace dqt
