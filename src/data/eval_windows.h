#pragma once
// Evaluation windows from a token shard: contiguous, non-overlapping windows from its start,
// each with its targets (the inputs shifted by one token).
#include <cstddef>
#include <cstdint>

#include "data/shard.h"

namespace dqt {

// Number of whole windows of seq tokens (plus the one extra target token) in the shard,
// limited to max_tokens input tokens in total (max_tokens == 0: no limit).
size_t eval_window_count(const Shard& shard, int seq, size_t max_tokens);

// Window w: inputs = tokens [w*seq, (w+1)*seq), targets = the same shifted by one.
void eval_window(const Shard& shard, size_t window_index, int seq, int32_t* inputs /* (seq) */,
                 int32_t* targets /* (seq) */);

}  // namespace dqt
