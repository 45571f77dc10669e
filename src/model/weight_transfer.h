#pragma once
// A model's weights carried into another training method's formats: how `dqt train
// --init-from FILE` starts fp, bitnet or dqt training from a trained model (a warm start in
// more bits, then quantized training: the compute-optimal QAT workflow). Each tensor is read
// as the source stores it (fp32 values, bitnet's latents, dqt's q / s) and written in the
// target's weight format (model/weight_format.h):
//   f32, ternary_latent  the real values as they are;
//   ternary_codes        from a bitnet source, its own absmean rule (the target's forward is
//                        the source's); from any other, TWN (model/ternary_convert.h): on an
//                        8-bit dqt model absmean costs +15% loss, TWN +0.2% (docs/results.md);
//   int_codes            absmax: the largest s that clips no weight, min(qp / max W,
//                        qn / min W), then q = round(W s) to nearest; a dqt source of the same
//                        width whose extreme codes are in use keeps its codes and scale.
#include "model/parameters.h"

namespace dqt {

// dqt::Error when the two models' tensors differ in name or shape.
void transfer_weights(const ModelParameters& source, ModelParameters& target);

}  // namespace dqt
