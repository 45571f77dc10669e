#pragma once
// A model's tensors, read one at a time. An inference model is built from a TensorSource
// tensor by tensor (infer/inference_model.h), so a model file need not become a whole
// ModelParameters first: a load holds the model it builds and one tensor beside it.
// Sources: live ModelParameters (infer/inference_model.cpp), GGUF files (export/gguf_model.h) and
// training checkpoints (train/model_checkpoint.h).
#include <cstdint>
#include <memory>

#include "core/float16.h"
#include "core/memory.h"
#include "kernels/ternary_matmul.h"
#include "model/parameters.h"

namespace dqt {

// A quantized tensor's integer form W = q * weight_scale. code_scale: the scale a coded format
// stores (W = q / code_scale, weight_scale = 1 / code_scale); 0 for bitnet's latents.
struct IntegerScales {
    float weight_scale = 0.0f;
    float code_scale = 0.0f;
};

// An fp tensor's weights as inference holds them: fp16 where every value is an fp16 exactly
// (halves), else fp32 (values). One of the two is filled (category weights).
struct FloatWeights {
    Array<Float16> halves;
    Array<float> values;
};
// values as fp16 where every one narrows exactly, trying the first values before it allocates
// (trained fp32 weights fail within them); else values as they are.
FloatWeights narrow_where_exact(Array<float> values);

class TensorSource {
public:
    virtual ~TensorSource() = default;
    virtual const ModelConfig& config() const = 0;
    virtual const MethodConfig& method() const = 0;
    virtual const ModelTensors& tensors() const = 0;

    // A tensor stored in fp32 (not stores_codes()): out (t.count()) = its values.
    virtual void read_values(const ParamTensor& t, float* out) const = 0;
    // An fp tensor's values where they stay in memory as long as the source: null where they
    // must be read (a file) or are not to be shared.
    virtual const float* values_in_place(const ParamTensor& /*t*/) const { return nullptr; }
    // An fp tensor read once for inference: by default read_values, narrowed where exact.
    virtual FloatWeights read_float_weights(const ParamTensor& t) const;
    // A quantized tensor: q (t.count()) = its integers, and their scales.
    virtual IntegerScales read_integers(const ParamTensor& t, int8_t* q) const = 0;
    // A ternary tensor straight into the ternary kernels' layout, where the source holds it in
    // that layout already (a GGUF file's TQ2_0 codes): out filled (its gamma the weight scale) and
    // true; false where read_integers and pack_ternary must do it.
    virtual bool read_ternary_packed(const ParamTensor& /*t*/, TernaryMatrix& /*out*/) const { return false; }
};

// The whole model in ModelParameters (to train on, convert or export it).
std::unique_ptr<ModelParameters> read_parameters(const TensorSource& source);

}  // namespace dqt
