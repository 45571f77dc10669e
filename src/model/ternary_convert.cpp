#include "model/ternary_convert.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "quant/ternary.h"

namespace dqt {

std::unique_ptr<ModelParameters> convert_to_ternary(const ModelParameters& model) {
    require(model.method.method != Method::fp,
            "ternary inference needs a bitnet or dqt checkpoint: an fp model has no quantized weights");
    MethodConfig ternary = model.method;
    ternary.method = Method::dqt;
    ternary.grid = CodeGrid{1};
    ternary.rounding = Rounding::stochastic;  // not used at inference; the method's default
    auto converted = std::make_unique<ModelParameters>(model.config, ternary);
    for (const ParamTensor& tensor : converted->layout.tensors) {
        const ParamTensor& source = model.layout.tensors[static_cast<size_t>(tensor.tensor_id)];
        if (tensor.storage == TensorStorage::f32) {
            std::memcpy(converted->value(tensor), model.value(source), tensor.count() * sizeof(float));
            continue;
        }
        // Dense source values in scratch, freed when this tensor is done.
        Array<float> dense(MemCategory::scratch, tensor.count());
        model.read_dense(source, dense.data());
        // BitNet's quantizer in the same float arithmetic as absmean_ternarize: round
        // W / (gamma + eps), dequantize as q * gamma (scale 1 / gamma).
        const float gamma = std::max(static_cast<float>(mean_abs(dense.data(), tensor.count())), 1e-12f);
        const float rounding_scale = 1.0f / (gamma + kTernaryEps);
        quantize_nearest(converted->code(tensor), dense.data(), tensor.count(), ternary.grid, rounding_scale);
        converted->scale(tensor) = 1.0f / gamma;
    }
    return converted;
}

}  // namespace dqt
