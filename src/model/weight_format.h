#pragma once
// How one tensor's weight is stored and how the passes read it. Every fact that depends on
// the storage lives in one table (as ggml keeps such facts in its type_traits): the layout,
// the dense and the integer reads, the optimizer's choice of update, checkpoints, inference
// packing and export ask the table, not the training method.
//
//   format         stored as                         the forward reads      integers
//   f32            fp32 values                       the values             -
//   ternary_latent fp32 latents (bitnet)             absmean ternary of     {-1, 0, 1} x mean|W|
//                                                    the latents
//   ternary_codes  2-bit codes, 4 a byte, + 1 scale  q / scale              {-1, 0, 1} x 1/scale
//   int_codes      one int8 code a weight, + 1 scale q / scale              [qn, qp] x 1/scale
//                  (dqt 2..8 bits)
//
// Code packing is quant/codes.h's; a weight's integer form W = q * weight_scale is what the
// integer kernels multiply (kernels/int8_rows.h), in training and inference alike.
#include <cstddef>
#include <cstdint>

#include "quant/codes.h"

namespace dqt {

struct ParamTensor;
struct MethodConfig;
enum class TensorRole;

// One tensor as it is stored, wherever that is (ModelParameters::stored, or a tensor read from a
// checkpoint file on its own): its fp32 values or its packed codes with their scale.
struct StoredTensor {
    const float* values = nullptr;   // (count) fp32-stored formats
    const uint8_t* codes = nullptr;  // (stored_bytes(count)) coded formats
    float scale = 0.0f;              // coded formats: W = q / scale
    CodeGrid grid;                   // coded formats
};

enum class WeightFormat { f32, ternary_latent, ternary_codes, int_codes };

struct WeightFormatTraits {
    const char* name;
    bool stores_codes;      // held in ModelParameters::codes with a scale (else in ::values)
    bool quantized;         // the forward multiplies int8 activations by the integer weights
    bool ternary_integers;  // those integers are in {-1, 0, 1}: ternary kernels, TQ2_0 export
    // Bytes that hold `count` elements in their array (values: 4 each; codes: packed).
    size_t (*stored_bytes)(size_t count);
    // out (count) = elements [first, first + count) as real numbers, `first` on a whole stored
    // byte (a multiple of 4 for ternary_codes): as stored (bitnet: the latents), and as the
    // forward reads them (bitnet: their ternary projection; the others: as stored).
    void (*read_stored)(const StoredTensor& stored, const ParamTensor& tensor, size_t first, size_t count, float* out);
    void (*read_forward)(const StoredTensor& stored, const ParamTensor& tensor, size_t first, size_t count, float* out);
    // The factor of the integer form, W = q * weight_scale (quantized formats only).
    float (*weight_scale)(const StoredTensor& stored, const ParamTensor& tensor);
    // q (count) = the integers of elements [first, first + count), given weight_scale(...)
    // (bitnet's integers depend on it, and it is a pass over the whole tensor).
    void (*read_integers)(const StoredTensor& stored, const ParamTensor& tensor, float weight_scale, size_t first,
                          size_t count, int8_t* q);
};

const WeightFormatTraits& weight_format_traits(WeightFormat format);

// The format a tensor of `role` takes under `method` (docs/METHOD.md section 2): block linears
// follow the method, the embedding and the head only when asked, norm gains stay f32.
WeightFormat weight_format_of(TensorRole role, const MethodConfig& method);

}  // namespace dqt
