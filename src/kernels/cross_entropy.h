#pragma once
// Fused softmax + negative log-likelihood over the vocabulary.
#include <cstdint>

namespace dqt {

// logits (rows, vocab); targets (rows), each in [0, vocab) (else dqt::Error).
// Returns sum over rows of -log softmax(logits_r)[targets_r], accumulated in double in row
// order. If dlogits (rows, vocab) is non-null, WRITES (does not accumulate)
// dlogits = grad_scale * (softmax(logits) - onehot(targets)). dlogits may alias logits.
// For evaluation pass dlogits = nullptr.
float cross_entropy_forward_backward(float* dlogits, const float* logits, const int32_t* targets, int rows,
                                     int vocab, float grad_scale);

}  // namespace dqt
