#pragma once
// Validation loss over contiguous windows of a shard, through the inference forward.
#include <cstdint>

#include "data/shard.h"
#include "data_parallel/comm.h"
#include "infer/inference_model.h"

namespace dqt {

struct EvalResult {
    double loss = 0.0;           // mean nats per token
    double bits_per_byte = 0.0;  // loss converted with the shard's UTF-8 bytes per token
    int64_t tokens = 0;          // tokens scored
};

// Scores up to max_tokens tokens in whole windows of `window` tokens (at most the model's
// seq_len), each a fresh sequence run through one InferenceSession in chunks of 128 tokens:
// memory is one window's KV cache and one chunk's scratch, whatever max_tokens is. Collective over comm: rank r scores windows
// r, r + N, ...; the window losses are summed in window order, so the result has the same
// bits on any number of ranks.
EvalResult evaluate(const InferenceModel& model, const Shard& shard, int window, int64_t max_tokens,
                    Communicator& comm = self_group());

}  // namespace dqt
