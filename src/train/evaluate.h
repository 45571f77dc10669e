#pragma once
// Validation loss over contiguous windows of a shard.
#include <cstdint>

#include "data/shard.h"
#include "dist/comm.h"
#include "model/llama.h"

namespace dqt {

struct EvalResult {
    double loss = 0.0;           // mean nats per token
    double bits_per_byte = 0.0;  // loss converted with the shard's UTF-8 bytes per token
    int64_t tokens = 0;          // tokens scored
};

// Scores up to max_tokens tokens in whole batches of acts.batch windows of acts.seq tokens.
// Collective over comm: rank r scores batches r, r + N, ...; the batch losses are summed in
// batch order, so the result has the same bits on any number of ranks.
EvalResult evaluate(const ModelParameters& model, Activations& acts, const Shard& shard, int64_t max_tokens,
                    Communicator& comm = self_group());

}  // namespace dqt
