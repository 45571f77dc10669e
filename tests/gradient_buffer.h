#pragma once
// Test helpers: every tensor's gradient kept whole, and the optimizer step over it. The
// product never holds a whole-model fp32 gradient on one rank (the fused updater frees each
// piece; data-parallel runs keep a shard), but the tests compare those paths against this one.
#include <cstdint>

#include "core/memory.h"
#include "model/gradient_sink.h"
#include "model/parameters.h"
#include "optim/optimizer.h"

namespace dqt {

// Every tensor's gradient in one flat fp32 array laid out by ParamTensor::flat_offset. Accumulates
// across backward passes until zero() is called.
class GradientBuffer : public GradientSink {
public:
    explicit GradientBuffer(const ParamLayout& layout);
    float* acquire(const ParamTensor& tensor, int row_begin, int) override {
        return of(tensor) + static_cast<size_t>(row_begin) * tensor.cols;
    }
    void release(const ParamTensor&, int, int) override {}

    float* of(const ParamTensor& tensor) const { return data_.data() + tensor.flat_offset; }
    const Array<float>& values() const { return data_; }
    void zero();
    // L2 norm of all gradients, summed as the product sums it (sum_of_squares).
    double global_norm() const;
    void scale(float factor);

private:
    Array<float> data_;  // (layout.total)
};

// The optimizer step of every element (optimizer_step_range over the whole layout).
void optimizer_step(ModelParameters& model, const GradientBuffer& gradients, OptimizerState& state,
                    const AdamWConfig& config, float lr, int64_t t, uint64_t seed);

}  // namespace dqt
