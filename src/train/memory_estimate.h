#pragma once
// What a training run will allocate at the least, known from its options alone: checked against
// the machine before anything is allocated (train/trainer.cpp, settle_run).
#include "train/options.h"

namespace dqt {

// A lower bound in bytes: every parameter stored as its method stores it (1 byte for a dqt code,
// 4 for an fp32 value; the fp32 ends of a dqt model counted as codes), the whole-model fp32
// gradient unless updates are fused, the two Adam moments at the state's width, and the logits
// of one micro-batch (batch x seq_len x vocabulary fp32 values, which the backward overwrites in
// place). The activations of every layer come on top.
double training_memory_lower_bound(const TrainOptions& options);

}  // namespace dqt
