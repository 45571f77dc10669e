#pragma once
// What a training run will allocate at the least, known from its options alone: checked against
// the machine before anything is allocated (train/trainer.cpp, settle_run).
#include "train/options.h"

namespace dqt {

// A lower bound in bytes: every parameter stored in its weight format (model/weight_format.h:
// 4 bytes an fp32 value, 1 a dqt code, 1/4 a ternary one), the whole-model fp32
// gradient unless updates are fused (then a tied embedding table's, held over the backward), the
// two Adam moments at the state's width, the logits of one micro-batch (batch x seq_len x
// vocabulary fp32 values, which the backward overwrites in place) and, on the CPU, every layer's
// attention probabilities (batch x heads x seq_len^2 fp32 values: what grows with the square of
// --seq-len). The other activations come on top.
double training_memory_lower_bound(const TrainOptions& options);

}  // namespace dqt
