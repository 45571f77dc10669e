#include "model/weight_transfer.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/error.h"
#include "model/ternary_convert.h"
#include "quant/codes.h"

namespace dqt {

namespace {

// The largest s that clips no weight, min(qp / max W, qn / min W) (1 for an all-zero tensor),
// then q = round(W s).
float absmax_onto_codes(uint8_t* codes, const float* w, size_t count, const CodeGrid& grid) {
    float largest = 0.0f, smallest = 0.0f;
    for (size_t i = 0; i < count; ++i) {
        largest = std::max(largest, w[i]);
        smallest = std::min(smallest, w[i]);
    }
    float scale = std::numeric_limits<float>::infinity();
    if (largest > 0.0f) scale = static_cast<float>(grid.qp()) / largest;
    if (smallest < 0.0f) scale = std::min(scale, static_cast<float>(grid.qn()) / smallest);
    if (std::isinf(scale)) scale = 1.0f;
    quantize_nearest(codes, w, count, grid, scale);
    return scale;
}

}  // namespace

void transfer_weights(const ModelParameters& source, ModelParameters& target) {
    const auto& from = source.layout.tensors;
    const auto& to = target.layout.tensors;
    require(from.size() == to.size(), "the initial model has " + std::to_string(from.size()) +
                                          " tensors where this run's model has " + std::to_string(to.size()) +
                                          ": give the run the initial model's shape");
    for (size_t t = 0; t < to.size(); ++t) {
        const ParamTensor& in = from[t];
        const ParamTensor& out = to[t];
        require(in.name == out.name && in.rows == out.rows && in.cols == out.cols,
                "the initial model's tensor " + in.name + " (" + std::to_string(in.rows) + " x " +
                    std::to_string(in.cols) + ") does not match this run's " + out.name + " (" +
                    std::to_string(out.rows) + " x " + std::to_string(out.cols) + ")");
        if (!out.stores_codes()) {
            in.traits().read_stored(source.stored(in), in, 0, in.count(), target.value(out));
            continue;
        }
        // The source's real values in scratch, freed when this tensor is done.
        Array<float> dense(MemCategory::scratch, in.count());
        in.traits().read_stored(source.stored(in), in, 0, in.count(), dense.data());
        if (out.format == WeightFormat::ternary_codes) {
            const TernaryRule rule = in.format == WeightFormat::ternary_latent ? TernaryRule::absmean : TernaryRule::twn;
            target.scale(out) = ternarize_onto_codes(target.code(out), dense.data(), out.count(), rule);
        } else {
            target.scale(out) = absmax_onto_codes(target.code(out), dense.data(), out.count(), target.method.grid);
        }
    }
}

}  // namespace dqt
