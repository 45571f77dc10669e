#include "model/weight_access.h"

#include <algorithm>
#include <cstring>

#include "kernels/embedding.h"
#include "kernels/gemm.h"
#include "kernels/linear.h"
#include "kernels/ternary_matmul.h"
#include "model/gradient_sink.h"
#include "quant/activation_quant.h"
#include "quant/bf16.h"
#include "quant/ternary.h"

namespace dqt {

DenseWeight::DenseWeight(const ModelParameters& model, const ParamTensor& tensor)
    : DenseWeight(model, tensor, 0, tensor.rows) {}

DenseWeight::DenseWeight(const ModelParameters& model, const ParamTensor& tensor, int row_begin, int row_end) {
    const bool bf16 = model.method.compute == ComputeDtype::bf16;
    const size_t first = static_cast<size_t>(row_begin) * tensor.cols;
    if (tensor.storage == TensorStorage::f32 && !tensor.quantized && !bf16) {
        data_ = model.value(tensor) + first;
        return;
    }
    const size_t count = static_cast<size_t>(row_end - row_begin) * tensor.cols;
    scratch_ = Array<float>(MemCategory::scratch, count);
    if (tensor.storage == TensorStorage::codes) {
        dequantize_codes(scratch_.data(), model.code(tensor) + code_bytes(model.method.grid, first), count,
                         model.method.grid, model.scale(tensor));
    } else if (tensor.quantized) {
        // gamma is the whole tensor's mean |W|, whichever rows are read.
        const float gamma = static_cast<float>(mean_abs(model.value(tensor), tensor.count()));
        ternarize_with_gamma(scratch_.data(), model.value(tensor) + first, count, gamma);
    } else {
        std::memcpy(scratch_.data(), model.value(tensor) + first, count * sizeof(float));
    }
    if (bf16) round_to_bf16_in_place(scratch_.data(), count);
    data_ = scratch_.data();
}

void prepare_linear_input(const ModelParameters& model, const ParamTensor& weight, float* in, int rows) {
    if (weight.quantized) absmax_quantize_rows(in, rows, weight.cols);
    if (model.method.compute == ComputeDtype::bf16) round_to_bf16_in_place(in, static_cast<size_t>(rows) * weight.cols);
}

namespace {

// Rows per slice in which a weight is read: a quantized embedding-sized weight in
// gradient-piece slices (its dense copy would be as large as an fp32 weight), others whole.
int read_slice_rows(const ModelParameters& model, const ParamTensor& weight) {
    return weight.quantized ? gradient_piece_rows(model.layout, weight) : weight.rows;
}

}  // namespace

void weight_linear_forward(const ModelParameters& model, const ParamTensor& weight, float* out, const float* in,
                           int rows) {
    const size_t id = static_cast<size_t>(weight.tensor_id);
    if (id < model.ternary_packed.size() && model.ternary_packed[id].rows > 0) {
        // Packed for inference: the input rows are already on the 8-bit grid
        // (prepare_linear_input), so this recovers their integers exactly.
        Int8Rows quantized;
        quantize_rows_int8(in, rows, weight.cols, quantized);
        ternary_matmul(model.ternary_packed[id], quantized, out);
        return;
    }
    const int slice = read_slice_rows(model, weight);
    if (slice >= weight.rows) {
        const DenseWeight w(model, weight);
        linear_forward(out, in, w.data(), rows, weight.cols, weight.rows);
        return;
    }
    for (int row_begin = 0; row_begin < weight.rows; row_begin += slice) {
        const int row_end = std::min(weight.rows, row_begin + slice);
        const DenseWeight w(model, weight, row_begin, row_end);
        // out[:, row_begin:row_end] = in · W[row_begin:row_end]^T
        gemm(false, true, rows, row_end - row_begin, weight.cols, 1.0f, in, weight.cols, w.data(), weight.cols, 0.0f,
             out + row_begin, weight.rows);
    }
}

namespace {

// dout as the backward GEMMs read it: itself, or under bf16 compute a bf16-rounded copy in
// scratch (the output gradient enters the products in bf16 too).
class BackwardOperand {
public:
    BackwardOperand(const ModelParameters& model, const float* dout, size_t count) : data_(dout) {
        if (model.method.compute != ComputeDtype::bf16) return;
        copy_ = Array<float>(MemCategory::scratch, count);
        std::memcpy(copy_.data(), dout, count * sizeof(float));
        round_to_bf16_in_place(copy_.data(), count);
        data_ = copy_.data();
    }
    const float* data() const { return data_; }

private:
    Array<float> copy_;
    const float* data_;
};

}  // namespace

void weight_linear_backward_input(const ModelParameters& model, const ParamTensor& weight, float* din,
                                  const float* dout, int rows) {
    const BackwardOperand d(model, dout, static_cast<size_t>(rows) * weight.rows);
    const int slice = read_slice_rows(model, weight);
    for (int row_begin = 0; row_begin < weight.rows; row_begin += slice) {
        const int row_end = std::min(weight.rows, row_begin + slice);
        const DenseWeight w(model, weight, row_begin, row_end);
        // din += dout[:, row_begin:row_end] · W[row_begin:row_end]
        linear_backward_input(din, d.data() + row_begin, weight.rows, w.data(), rows, weight.cols, row_end - row_begin);
    }
}

void weight_linear_backward_weight(const ModelParameters& model, const ParamTensor& weight, float* dweight,
                                   const float* dout, const float* in, int rows, int row_begin, int row_end) {
    const BackwardOperand d(model, dout, static_cast<size_t>(rows) * weight.rows);
    linear_backward_weight(dweight, d.data() + row_begin, weight.rows, in, rows, weight.cols, row_end - row_begin);
}

void weight_embedding_forward(const ModelParameters& model, const ParamTensor& embedding, float* out,
                              const int32_t* tokens, int count) {
    const int C = embedding.cols;
    if (embedding.storage == TensorStorage::f32) {
        embedding_forward(out, tokens, model.value(embedding), count, C);
        return;
    }
    const uint8_t* codes = model.code(embedding);
    const float scale = model.scale(embedding);
    const CodeGrid& grid = model.method.grid;
#pragma omp parallel for schedule(static)
    for (int i = 0; i < count; ++i) {
        const size_t row = static_cast<size_t>(tokens[i]) * C;
        for (int j = 0; j < C; ++j) out[static_cast<size_t>(i) * C + j] = read_code(codes, grid, row + j) / scale;
    }
}

}  // namespace dqt
