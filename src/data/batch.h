#pragma once
// Training batches from a token shard: random windows, reproducible and independent of threads
// and ranks. Sequence g of optimizer step s (g = global index within the step, counting over
// micro-steps: micro-step m of B sequences holds g in [m*B, (m+1)*B)) starts at
//     random_u64(seed, kStreamBatch, s, g) % (token_count - seq)
// so a data-parallel rank, which runs whole micro-steps (rank r of N: micro-steps
// [r*k, (r+1)*k) of the step's N*k), draws exactly its sequences of the same global batch with
// sample_sequences. Targets are the inputs shifted by one token. (Evaluation reads contiguous
// windows instead: data/eval_windows.h.)
#include <cstddef>
#include <cstdint>

#include "data/shard.h"

namespace dqt {

// Sequences [first_global_index, first_global_index + count) of step `step` (which must fit
// in 32 bits, the RNG's step counter). Throws dqt::Error if the shard holds <= seq tokens.
void sample_sequences(const Shard& shard, uint64_t seed, uint64_t step, uint64_t first_global_index, int count, int seq,
                      int32_t* inputs /* (count, seq) */, int32_t* targets /* (count, seq) */);

}  // namespace dqt
