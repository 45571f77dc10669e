#pragma once
// Validation loss over contiguous windows of a shard, through the inference forward. One
// process here; data_parallel/evaluate_ranks.h shares the windows among ranks.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "data/shard.h"
#include "infer/inference_model.h"
#include "infer/session.h"

namespace dqt {

struct EvalResult {
    double loss = 0.0;           // mean nats per token
    double bits_per_byte = 0.0;  // loss converted with the shard's UTF-8 bytes per token
    int64_t tokens = 0;          // tokens scored
};

// Scores up to max_tokens tokens in whole windows of `window` tokens (at most the model's
// seq_len), each a fresh sequence run through one InferenceSession in chunks of 128 tokens:
// memory is one window's KV cache and one chunk's scratch, whatever max_tokens is. The window
// losses are summed in window order. `cache`: what that KV cache stores (an fp16 or int8 one
// scores what generation with it would predict).
EvalResult evaluate(const InferenceModel& model, const Shard& shard, int window, int64_t max_tokens,
                    KvCacheType cache = KvCacheType::f32);

// The parts of evaluate, for callers that share the windows out:
// how many windows it scores (a one-line error when none fits or the window is too long),
size_t evaluation_windows(const InferenceModel& model, const Shard& shard, int window, int64_t max_tokens);
// the summed cross-entropy (nats) of windows first, first + stride, ... below `windows`, in that
// order,
std::vector<double> window_losses(const InferenceModel& model, const Shard& shard, int window, size_t windows,
                                  size_t first, size_t stride, KvCacheType cache = KvCacheType::f32);
// and the result from the sum of every window's loss.
EvalResult evaluation_result(const Shard& shard, int window, size_t windows, double loss_sum);

}  // namespace dqt
