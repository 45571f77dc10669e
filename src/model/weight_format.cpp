#include "model/weight_format.h"

#include <cstring>

#include "core/error.h"
#include "model/parameters.h"
#include "quant/codes.h"
#include "quant/ternary.h"

namespace dqt {

namespace {

size_t float_bytes(size_t count) { return count * sizeof(float); }
size_t ternary_code_bytes(size_t count) { return code_bytes(CodeGrid{1}, count); }
size_t int_code_bytes(size_t count) { return count; }

void read_values(const StoredTensor& stored, const ParamTensor& tensor, size_t first, size_t count, float* out) {
    std::memcpy(out, stored.values + first, count * sizeof(float));
}

// bitnet's gamma is the whole tensor's mean |W|, whichever elements are read.
float latent_gamma(const StoredTensor& stored, const ParamTensor& tensor) {
    return static_cast<float>(mean_abs(stored.values, tensor.count()));
}

void read_ternarized_latents(const StoredTensor& stored, const ParamTensor& tensor, size_t first, size_t count,
                             float* out) {
    ternarize_with_gamma(out, stored.values + first, count, latent_gamma(stored, tensor));
}

void read_latent_integers(const StoredTensor& stored, const ParamTensor& tensor, float gamma, size_t first,
                          size_t count, int8_t* q) {
    ternary_codes_with_gamma(q, stored.values + first, count, gamma);
}

// The packed codes from element `first` on; `first` starts a whole byte.
const uint8_t* codes_from(const StoredTensor& stored, size_t first) {
    return stored.codes + code_bytes(stored.grid, first);
}

void read_dequantized_codes(const StoredTensor& stored, const ParamTensor& tensor, size_t first, size_t count,
                            float* out) {
    dequantize_codes(out, codes_from(stored, first), count, stored.grid, stored.scale);
}

float code_weight_scale(const StoredTensor& stored, const ParamTensor&) { return 1.0f / stored.scale; }

void read_code_integers(const StoredTensor& stored, const ParamTensor& tensor, float, size_t first, size_t count,
                        int8_t* q) {
    const uint8_t* codes = codes_from(stored, first);
    const CodeGrid& grid = stored.grid;
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < count; ++i) q[i] = static_cast<int8_t>(read_code(codes, grid, i));
}

[[noreturn]] float no_weight_scale(const StoredTensor&, const ParamTensor& tensor) {
    throw Error("weight_scale: " + tensor.name + " is stored in fp32 and read as it is, not as integers");
}

[[noreturn]] void no_integers(const StoredTensor&, const ParamTensor& tensor, float, size_t, size_t, int8_t*) {
    throw Error("read_integers: " + tensor.name + " is stored in fp32 and read as it is, not as integers");
}

// Indexed by WeightFormat.
const WeightFormatTraits kTraits[] = {
    {"f32", false, false, false, float_bytes, read_values, read_values, no_weight_scale, no_integers},
    {"ternary_latent", false, true, true, float_bytes, read_values, read_ternarized_latents, latent_gamma,
     read_latent_integers},
    {"ternary_codes", true, true, true, ternary_code_bytes, read_dequantized_codes, read_dequantized_codes,
     code_weight_scale, read_code_integers},
    {"int_codes", true, true, false, int_code_bytes, read_dequantized_codes, read_dequantized_codes,
     code_weight_scale, read_code_integers},
};

}  // namespace

const WeightFormatTraits& weight_format_traits(WeightFormat format) { return kTraits[static_cast<int>(format)]; }

WeightFormat weight_format_of(TensorRole role, const MethodConfig& method) {
    bool follows_method = false;
    switch (role) {
        case TensorRole::block_linear: follows_method = true; break;
        case TensorRole::embedding: follows_method = method.quantize_embedding; break;
        case TensorRole::head: follows_method = method.quantize_head; break;
        case TensorRole::norm: follows_method = false; break;
    }
    if (!follows_method) return WeightFormat::f32;
    switch (method.kind) {
        case Method::fp: return WeightFormat::f32;
        case Method::bitnet: return WeightFormat::ternary_latent;
        case Method::dqt: return method.grid.ternary() ? WeightFormat::ternary_codes : WeightFormat::int_codes;
    }
    return WeightFormat::f32;
}

}  // namespace dqt
