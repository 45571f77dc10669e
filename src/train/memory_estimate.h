#pragma once
// What a training run will allocate at the least, known from its options alone: checked against
// the machine before anything is allocated (train/trainer.cpp, settle_run).
#include "train/options.h"

namespace dqt {

// A lower bound in bytes: every parameter stored in its weight format (model/weight_format.h:
// 4 bytes an fp32 value, 1 a dqt code, 1/4 a ternary one), the whole-model fp32 gradient unless
// updates are fused (then a tied embedding table's, held over the backward), the two Adam
// moments at the state's width and, on the CPU, training_activation_bytes (on a GPU the logits
// of one micro-batch: batch x seq_len x vocabulary fp32 values). Transient buffers come on top.
double training_memory_lower_bound(const TrainOptions& options);

// Throws a one-line error naming the fix when that lower bound is more than this machine's
// memory: `dqt train` and the training benchmarks, before they allocate.
void require_training_fits_in_memory(const TrainOptions& options);

// The bytes Activations(config, batch, config.seq_len) allocates (model/llama.h): every layer's
// saved values (counted from the list that allocates them, model/layer_values.h) and its
// (batch, heads, seq_len, seq_len) softmax, the logits (which the backward overwrites in place)
// and the backward's scratch. What grows with the square of --seq-len is the softmax.
double training_activation_bytes(const ModelConfig& config, int batch);

}  // namespace dqt
