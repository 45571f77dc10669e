#include "model/initialization.h"

#include "core/rng.h"
#include "quant/codes.h"
#include "quant/ternary.h"

namespace dqt {

void initialize_parameters(ModelParameters& model, uint64_t seed) {
    const CodeGrid& grid = model.method.grid;
    for (const ParamTensor& tensor : model.layout.tensors) {
        const size_t count = tensor.count();
        if (!tensor.is_matrix()) {
            float* w = model.value(tensor);
            for (size_t i = 0; i < count; ++i) w[i] = 1.0f;
            continue;
        }
        // Coded tensors draw into a temporary fp32 buffer (scratch, freed at once): the
        // initial draw exists only until it is snapped onto the grid.
        Array<float> draw;
        float* w = model.value(tensor);
        if (tensor.stores_codes()) {
            draw = Array<float>(MemCategory::scratch, count);
            w = draw.data();
        }
#pragma omp parallel for schedule(static)
        for (size_t i = 0; i < count; ++i) w[i] = initial_draw(model.config, seed, tensor, i);
        if (tensor.stores_codes()) {
            model.scale(tensor) = absmean_code_scale(grid, mean_abs(w, count));
            quantize_nearest(model.code(tensor), w, count, grid, model.scale(tensor));
        }
    }
}

float initial_draw(const ModelConfig& config, uint64_t seed, const ParamTensor& tensor, size_t i) {
    return config.init_std * normal01(seed, kStreamInit, static_cast<uint32_t>(tensor.tensor_id), i);
}

}  // namespace dqt
