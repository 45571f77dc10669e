#include "model/tensor_source.h"

#include <algorithm>
#include <iterator>
#include <utility>
#include <vector>

#include "kernels/float16_widen.h"
#include "quant/codes.h"

namespace dqt {

FloatWeights narrow_where_exact(Array<float> values) {
    Float16 probe[256];
    if (!narrow_f16_exactly(values.data(), probe, std::min<size_t>(std::size(probe), values.size())))
        return {{}, std::move(values)};
    Array<Float16> halves(MemCategory::weights, values.size());
    if (!narrow_f16_exactly(values.data(), halves.data(), values.size())) return {{}, std::move(values)};
    return {std::move(halves), {}};
}

FloatWeights TensorSource::read_float_weights(const ParamTensor& t) const {
    Array<float> values(MemCategory::weights, t.count());
    read_values(t, values.data());
    return narrow_where_exact(std::move(values));
}

std::unique_ptr<ModelParameters> read_parameters(const TensorSource& source) {
    auto model = std::make_unique<ModelParameters>(source.config(), source.method());
    // The source's tensors are those of a layout made alike: the same names, shapes and places.
    for (const ParamTensor& t : model->layout.tensors) {
        if (!t.stores_codes()) {
            source.read_values(t, model->value(t));
            continue;
        }
        std::vector<int8_t> q(t.count());
        model->scale(t) = source.read_integers(t, q.data()).code_scale;
        for (size_t i = 0; i < q.size(); ++i) write_code(model->code(t), model->method.grid, i, q[i]);
    }
    return model;
}

}  // namespace dqt
