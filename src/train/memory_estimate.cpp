#include "train/memory_estimate.h"

namespace dqt {

double training_memory_lower_bound(const TrainOptions& options) {
    const double parameters = static_cast<double>(options.model.parameter_count());
    const double weight_bytes = options.method.kind == Method::dqt ? 1.0 : 4.0;
    const double gradient_bytes = options.fused_update ? 0.0 : 4.0;
    const double moment_bytes = options.optim_state == StateDtype::fp32 ? 4.0
                                : options.optim_state == StateDtype::bf16 ? 2.0
                                                                           : 1.0;
    const double logits = static_cast<double>(options.batch) * options.model.seq_len * options.model.vocab_size * 4.0;
    return parameters * (weight_bytes + gradient_bytes + 2.0 * moment_bytes) + logits;
}

}  // namespace dqt
