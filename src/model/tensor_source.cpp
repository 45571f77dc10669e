#include "model/tensor_source.h"

#include <vector>

#include "quant/codes.h"

namespace dqt {

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
