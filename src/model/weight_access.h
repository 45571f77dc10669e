#pragma once
// How the forward and backward passes read a weight under each training method, and the
// linear and embedding ops on top of that, for the training passes.
#include <cstdint>
#include <vector>

#include "core/memory.h"
#include "model/parameters.h"

namespace dqt {

// A weight as the passes read it, dense fp32 (rows, cols), valid while this object lives:
//   fp32 stored and read as is: the stored values themselves, no copy;
//   bitnet: the absmean ternary projection of the latent weights, in scratch;
//   dqt:    codes / scale, in scratch;
// and with bf16 compute, rounded to bf16 (in scratch). Scratch is freed with the object, so
// no fp32 copy of a coded weight outlives the op that needed it.
class DenseWeight {
public:
    DenseWeight(const ModelParameters& model, const ParamTensor& tensor);
    // Rows [row_begin, row_end) only, (row_end - row_begin, cols); row_begin * cols must be a
    // multiple of 4 (whole packed ternary bytes).
    DenseWeight(const ModelParameters& model, const ParamTensor& tensor, int row_begin, int row_end);
    const float* data() const { return data_; }

private:
    Array<float> scratch_;  // (rows, cols) category scratch, when a copy is needed
    const float* data_ = nullptr;
};

// The input rows (rows, weight.cols) of a linear, prepared once per input for every linear
// reading it (q, k and v share one):
//   fp weights: the rows themselves (rounded to bf16 in place under bf16 compute);
//   quantized:  each row x is quantized to int8 (kernels/int8_rows.h: a, s); `in` becomes the
//               fake-quantized a / s in place, which the straight-through backward reads, and
//               the forward multiplies the integers a (kept here as floats) with the integer
//               weight codes, then scales by int8_output_factor(weight_scale, s): the very
//               arithmetic of the integer inference kernels, so a ternary model's training
//               forward and its inference agree bit for bit (integer sums below 2^24 are
//               exact in fp32 whatever the GEMM's order).
class LinearInput {
public:
    LinearInput(const ModelParameters& model, const ParamTensor& weight, float* in, int rows);
    bool quantized() const { return !scales_.empty(); }
    const float* operand() const { return operand_; }  // (rows, cols) what the product multiplies
    float scale(int row) const { return scales_[static_cast<size_t>(row)]; }  // s, quantized only

private:
    const float* operand_ = nullptr;
    Array<float> integers_;     // (rows, cols) the int8 values a as floats, category scratch
    std::vector<float> scales_; // (rows)
};

// out (rows, weight.rows) = in (rows, weight.cols) · W^T. A quantized embedding-sized weight
// (the lm_head) is read in slices of its gradient pieces, so its dense copy stays small.
void weight_linear_forward(const ModelParameters& model, const ParamTensor& weight, float* out, const LinearInput& in,
                           int rows);

// din (rows, weight.cols) += dout (rows, weight.rows) · W.
void weight_linear_backward_input(const ModelParameters& model, const ParamTensor& weight, float* din,
                                  const float* dout, int rows);

// Rows [row_begin, row_end) of the weight's gradient: dweight (row_end - row_begin, weight.cols)
// += dout[:, row_begin:row_end]^T · in. Straight-through for bitnet and dqt: the gradient with
// respect to the weight the forward read goes to the stored weight unchanged.
void weight_linear_backward_weight(const ModelParameters& model, const ParamTensor& weight, float* dweight,
                                   const float* dout, const float* in, int rows, int row_begin, int row_end);

// out (count, C) = rows tokens[i] of the embedding, read as stored (codes dequantized row by row).
void weight_embedding_forward(const ModelParameters& model, const ParamTensor& embedding, float* out,
                              const int32_t* tokens, int count);

}  // namespace dqt
