#include "kernels/cross_entropy.h"

#include <cmath>
#include <cstddef>
#include <string>

#include "core/error.h"
#include "core/memory.h"
#include "kernels/vecmath.h"

namespace dqt {
namespace {

// One row: returns -log softmax(z)[target]. e (vocab) receives exp(z - max z); when dz is
// non-null it is e itself and ends as grad_scale * (softmax - onehot). e may alias z.
DQT_TARGET_CLONES
double row_forward_backward(float* e, bool write_gradient, const float* z, int target, int vocab,
                            float grad_scale) {
    const float max_z = max_f32(z, vocab);
    const float z_target = z[target];  // read before e, which may alias z, is written
    for (int c = 0; c < vocab; ++c) e[c] = exp_f32(z[c] - max_z);
    const double sum = sum_f64(e, vocab);
    if (write_gradient) {
        const float factor = static_cast<float>(grad_scale / sum);
        for (int c = 0; c < vocab; ++c) e[c] *= factor;
        e[target] -= grad_scale;
    }
    return std::log(sum) + max_z - z_target;
}

}  // namespace

float cross_entropy_forward_backward(float* dlogits, const float* logits, const int32_t* targets, int rows,
                                     int vocab, float grad_scale) {
    for (int r = 0; r < rows; ++r)
        require(targets[r] >= 0 && targets[r] < vocab,
                "cross_entropy: target " + std::to_string(targets[r]) + " at row " + std::to_string(r) +
                    " is outside the vocabulary [0, " + std::to_string(vocab) + ")");
    // Per-row losses, summed afterwards in row order so the total is thread-count independent.
    Array<double> row_loss(MemCategory::scratch, rows);
#pragma omp parallel
    {
        // Without dlogits, exp(z - max) of a row goes to a per-thread buffer.
        Array<float> row_exp(MemCategory::scratch, dlogits ? 0 : vocab);
#pragma omp for schedule(static)
        for (int r = 0; r < rows; ++r) {
            const size_t offset = static_cast<size_t>(r) * vocab;
            float* e = dlogits ? dlogits + offset : row_exp.data();  // (vocab)
            row_loss[r] = row_forward_backward(e, dlogits != nullptr, logits + offset, targets[r], vocab, grad_scale);
        }
    }
    double loss = 0;
    for (int r = 0; r < rows; ++r) loss += row_loss[r];
    return static_cast<float>(loss);
}

}  // namespace dqt
