#include "model/weight_access.h"

#include <cstring>

#include "kernels/embedding.h"
#include "kernels/linear.h"
#include "quant/activation_quant.h"
#include "quant/bf16.h"
#include "quant/ternary.h"

namespace dqt {

DenseWeight::DenseWeight(const ModelParameters& model, const ParamTensor& tensor) {
    const bool bf16 = model.method.compute == ComputeDtype::bf16;
    if (tensor.storage == TensorStorage::f32 && !tensor.quantized && !bf16) {
        data_ = model.value(tensor);
        return;
    }
    const size_t count = tensor.count();
    scratch_ = Array<float>(MemCategory::scratch, count);
    if (tensor.storage == TensorStorage::codes) {
        model.read_dense(tensor, scratch_.data());
    } else if (tensor.quantized) {
        absmean_ternarize(scratch_.data(), model.value(tensor), count);
    } else {
        std::memcpy(scratch_.data(), model.value(tensor), count * sizeof(float));
    }
    if (bf16) round_to_bf16_in_place(scratch_.data(), count);
    data_ = scratch_.data();
}

void prepare_linear_input(const ModelParameters& model, const ParamTensor& weight, float* in, int rows) {
    if (weight.quantized) absmax_quantize_rows(in, rows, weight.cols);
    if (model.method.compute == ComputeDtype::bf16) round_to_bf16_in_place(in, static_cast<size_t>(rows) * weight.cols);
}

void weight_linear_forward(const ModelParameters& model, const ParamTensor& weight, float* out, const float* in,
                           int rows) {
    const DenseWeight w(model, weight);
    linear_forward(out, in, w.data(), rows, weight.cols, weight.rows);
}

void weight_linear_backward(ModelParameters& model, const ParamTensor& weight, float* din, const float* dout,
                            const float* in, int rows) {
    const DenseWeight w(model, weight);
    if (model.method.compute != ComputeDtype::bf16) {
        linear_backward(din, model.grad(weight), dout, in, w.data(), rows, weight.cols, weight.rows);
        return;
    }
    // bf16 compute: the output gradient enters both products rounded to bf16 too.
    const size_t count = static_cast<size_t>(rows) * weight.rows;
    Array<float> dout_bf16(MemCategory::scratch, count);  // (rows, weight.rows)
    std::memcpy(dout_bf16.data(), dout, count * sizeof(float));
    round_to_bf16_in_place(dout_bf16.data(), count);
    linear_backward(din, model.grad(weight), dout_bf16.data(), in, w.data(), rows, weight.cols, weight.rows);
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
