#include "model/ternary_pack.h"

#include <vector>

#include "quant/codes.h"
#include "quant/ternary.h"

namespace dqt {

namespace {

bool reads_ternary(const ModelParameters& model, const ParamTensor& tensor) {
    if (!tensor.quantized || tensor.role == TensorRole::embedding) return false;  // embeddings are lookups
    if (tensor.storage == TensorStorage::codes) return model.method.grid.ternary();
    return model.method.method == Method::bitnet;
}

}  // namespace

int pack_ternary_weights(ModelParameters& model) {
    model.ternary_packed.clear();
    model.ternary_packed.resize(model.layout.tensors.size());
    int packed = 0;
    for (const ParamTensor& tensor : model.layout.tensors) {
        if (!reads_ternary(model, tensor)) continue;
        std::vector<int8_t> q(tensor.count());
        float gamma = 0.0f;
        if (tensor.storage == TensorStorage::codes) {
            const uint8_t* codes = model.code(tensor);
            for (size_t i = 0; i < q.size(); ++i) q[i] = static_cast<int8_t>(read_code(codes, model.method.grid, i));
            gamma = 1.0f / model.scale(tensor);
        } else {
            gamma = static_cast<float>(mean_abs(model.value(tensor), tensor.count()));
            ternary_codes_with_gamma(q.data(), model.value(tensor), tensor.count(), gamma);
        }
        model.ternary_packed[static_cast<size_t>(tensor.tensor_id)] =
            pack_ternary(q.data(), tensor.rows, tensor.cols, gamma);
        ++packed;
    }
    return packed;
}

}  // namespace dqt
