#pragma once
// A model as inference runs it (infer/session.h), built explicitly from a TensorSource
// (model/tensor_source.h) tensor by tensor: the live parameters of a training run, or a
// checkpoint or GGUF file read straight into this model's layout. Every
// linear is held in the form its products run in:
//   ternary: packed 2-bit codes for the ternary x int8 kernels (bitnet; dqt at 1.58 bits);
//   ternary_lookup: the same weights in the 1.67-bit lookup layout, where it decodes faster
//            (infer/ternary_layout.h moves them there after the build);
//   int8:    int8 codes for the int8 x int8 kernels (dqt at 2..8 bits);
//   dense:   fp32, products by gemm (fp models; the fp32 ends of quantized ones);
//   half:    the same where every value is an fp16 exactly (a model read from an F16 GGUF, as
//            BitNet b1.58 2B4T's embedding is): 2 bytes a weight; a prompt's products widen a
//            block of rows at a time into the dense format's gemm (its logits bit for bit),
//            decode's run kernels/half_gemv.h (another summation order: float tolerance).
// A quantized linear is W = q * weight_scale with q and weight_scale taken from
// model/weight_access.h, the integers the training forward multiplies. Nothing is kept for
// a backward pass, and nothing here changes when the source's weights change afterwards:
// build a new InferenceModel (training does, at every evaluation).
#include <cstdint>
#include <string>
#include <vector>

#include "core/float16.h"
#include "core/memory.h"
#include "kernels/int8_matmul.h"
#include "kernels/ternary_lookup.h"
#include "kernels/ternary_matmul.h"
#include "model/parameters.h"
#include "model/tensor_source.h"

namespace dqt {

enum class LinearFormat { dense, half, ternary, ternary_lookup, int8 };

struct InferenceLinear {
    LinearFormat format = LinearFormat::dense;
    int rows = 0, cols = 0;         // (out_features, in_features)
    const float* dense = nullptr;   // (rows, cols) fp32, format dense: owned_dense, or the source's values
    Array<float> owned_dense;
    const Float16* halves = nullptr;  // (rows, cols), format half: owned_halves, or the tied embedding's
    Array<Float16> owned_halves;
    TernaryMatrix ternary;          // format ternary
    TernaryLookupMatrix lookup;     // format ternary_lookup
    Int8Matrix int8;                // format int8

    bool quantized() const {
        return format == LinearFormat::ternary || format == LinearFormat::ternary_lookup || format == LinearFormat::int8;
    }
    size_t weight_bytes() const;    // what one product reads
};

// The token embedding: fp32 rows, fp16 ones where every value is an fp16 exactly (as for a
// linear), or (quantized embedding) int8 codes with x = q / code_scale, the training forward's
// reading (model/weight_access.h).
struct InferenceEmbedding {
    int rows = 0, cols = 0;         // (vocab, dim)
    const float* dense = nullptr;   // (rows, cols) when fp32: owned_dense or the source's values
    Array<float> owned_dense;
    Array<Float16> halves;          // (rows, cols) when fp16 (then dense is null)
    Array<int8_t> codes;            // (rows, cols) when quantized
    float code_scale = 0.0f;

    // out (count, cols) = rows tokens[i]; tokens already checked against the vocabulary.
    void lookup(const int32_t* tokens, int count, float* out) const;
};

struct InferenceLayer {
    const float* attn_norm = nullptr;     // (C)
    InferenceLinear wq, wk, wv, wo;
    const float* attn_subnorm = nullptr;  // (C), null without SubLN
    const float* ffn_norm = nullptr;      // (C)
    InferenceLinear w_gate, w_up, w_down;
    const float* ffn_subnorm = nullptr;   // (F), null without SubLN
};

// Whether fp32 tensors are copied, or read from the source, which must then outlive the model
// (evaluation during training: no second copy of an fp model's weights).
enum class WeightSource { copy, borrow };

class InferenceModel {
public:
    explicit InferenceModel(const ModelParameters& source, WeightSource fp32_tensors = WeightSource::copy);
    explicit InferenceModel(const TensorSource& source);
    InferenceModel(const InferenceModel&) = delete;
    InferenceModel& operator=(const InferenceModel&) = delete;

    ModelConfig config;
    std::string method_label;
    InferenceEmbedding embedding;
    std::vector<InferenceLayer> layers;
    const float* output_norm = nullptr;  // (C)
    InferenceLinear head;                // (V, C)

    // Bytes of weights one decode step reads: every linear and norm, one embedding row.
    size_t weight_bytes_per_token() const;
    // The integer kernels this model runs on ("avx512-vnni", ...; "none" for a dense model).
    std::string kernels_label() const;

private:
    std::vector<Array<float>> owned_norms_;
};

}  // namespace dqt
