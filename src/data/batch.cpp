#include "data/batch.h"

#include <algorithm>
#include <limits>
#include <string>

#include "core/error.h"
#include "core/rng.h"

namespace dqt {

void sample_sequences(const Shard& shard, uint64_t seed, uint64_t step, uint64_t first_global_index, int count, int seq,
                      int32_t* inputs, int32_t* targets) {
    if (seq <= 0 || shard.token_count() <= static_cast<size_t>(seq)) {
        throw Error("shard " + shard.path() + " holds " + std::to_string(shard.token_count()) +
                    " tokens, too few for sequences of " + std::to_string(seq) +
                    ": use a larger corpus or a smaller --seq-len");
    }
    if (step > std::numeric_limits<uint32_t>::max()) {
        throw Error("step " + std::to_string(step) + " exceeds the 32-bit step counter of the batch sampler");
    }
    // Offsets in [0, token_count - seq): the last target, at offset + seq, is still inside.
    const uint64_t starts = shard.token_count() - static_cast<size_t>(seq);
    for (int k = 0; k < count; ++k) {
        const uint64_t offset =
            random_u64(seed, kStreamBatch, static_cast<uint32_t>(step), first_global_index + k) % starts;
        shard.read(offset, seq, inputs + static_cast<size_t>(k) * seq);
        shard.read(offset + 1, seq, targets + static_cast<size_t>(k) * seq);
    }
}

size_t eval_window_count(const Shard& shard, int seq, size_t max_tokens) {
    require(seq > 0, "sequence length must be positive");
    if (shard.token_count() == 0) return 0;
    size_t windows = (shard.token_count() - 1) / seq;  // each window needs seq + 1 tokens
    if (max_tokens > 0) windows = std::min(windows, max_tokens / seq);
    return windows;
}

void eval_window(const Shard& shard, size_t window_index, int seq, int32_t* inputs, int32_t* targets) {
    if (window_index >= eval_window_count(shard, seq, 0)) {
        throw Error("evaluation window " + std::to_string(window_index) + " is past the end of shard " + shard.path());
    }
    const size_t offset = window_index * seq;
    shard.read(offset, seq, inputs);
    shard.read(offset + 1, seq, targets);
}

}  // namespace dqt
