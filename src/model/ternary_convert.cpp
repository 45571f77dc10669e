#include "model/ternary_convert.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "quant/codes.h"
#include "quant/ternary.h"

namespace dqt {

const char* ternary_rule_name(TernaryRule rule) { return rule == TernaryRule::twn ? "twn" : "absmean"; }

TernaryRule parse_ternary_rule(const std::string& name) {
    if (name == "absmean") return TernaryRule::absmean;
    if (name == "twn") return TernaryRule::twn;
    throw Error("unknown ternary rule '" + name + "': use absmean or twn");
}

namespace {

// TWN: q = sign(w) where |w| > 0.7 mean|w|, alpha = mean of those |w|. Returns alpha.
float twn_ternarize(uint8_t* codes, const float* w, size_t count, const CodeGrid& grid) {
    const double threshold = 0.7 * mean_abs(w, count);
    double kept_sum = 0.0;
    size_t kept = 0;
    for (size_t i = 0; i < count; ++i) {
        const double magnitude = std::fabs(w[i]);
        const int q = magnitude > threshold ? (w[i] > 0 ? 1 : -1) : 0;
        write_code(codes, grid, i, q);
        if (q != 0) {
            kept_sum += magnitude;
            ++kept;
        }
    }
    return std::max(static_cast<float>(kept ? kept_sum / static_cast<double>(kept) : 0.0), 1e-12f);
}

}  // namespace

float ternarize_onto_codes(uint8_t* codes, const float* w, size_t count, TernaryRule rule) {
    const CodeGrid ternary{1};
    if (rule == TernaryRule::twn) return 1.0f / twn_ternarize(codes, w, count, ternary);
    // BitNet's quantizer in the same float arithmetic as absmean_ternarize: round
    // W / (gamma + eps), dequantize as q * gamma (scale 1 / gamma).
    const float gamma = std::max(static_cast<float>(mean_abs(w, count)), 1e-12f);
    quantize_nearest(codes, w, count, ternary, 1.0f / (gamma + kTernaryEps));
    return 1.0f / gamma;
}

std::unique_ptr<ModelParameters> convert_to_ternary(const ModelParameters& model, TernaryRule rule) {
    require(model.method.kind != Method::fp,
            "ternary inference needs a bitnet or dqt checkpoint: an fp model has no quantized weights");
    MethodConfig ternary = model.method;
    ternary.kind = Method::dqt;
    ternary.grid = CodeGrid{1};
    ternary.rounding = Rounding::stochastic;  // not used at inference; the method's default
    auto converted = std::make_unique<ModelParameters>(model.config, ternary);
    for (const ParamTensor& tensor : converted->layout.tensors) {
        const ParamTensor& source = model.layout.tensors[static_cast<size_t>(tensor.tensor_id)];
        if (!tensor.stores_codes()) {
            std::memcpy(converted->value(tensor), model.value(source), tensor.count() * sizeof(float));
            continue;
        }
        // Dense source values in scratch, freed when this tensor is done.
        Array<float> dense(MemCategory::scratch, tensor.count());
        model.read_dense(source, dense.data());
        converted->scale(tensor) = ternarize_onto_codes(converted->code(tensor), dense.data(), tensor.count(), rule);
    }
    return converted;
}

}  // namespace dqt
