#include "data/batch.h"

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

}  // namespace dqt
