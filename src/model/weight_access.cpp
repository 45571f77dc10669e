#include "model/weight_access.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "kernels/embedding.h"
#include "kernels/gemm.h"
#include "kernels/int8_rows.h"
#include "kernels/linear.h"
#include "quant/activation_quant.h"
#include "quant/bf16.h"
#include "quant/codes.h"
#include "quant/ternary.h"

namespace dqt {

DenseWeight::DenseWeight(const ModelParameters& model, const ParamTensor& tensor)
    : DenseWeight(model, tensor, 0, tensor.rows) {}

DenseWeight::DenseWeight(const ModelParameters& model, const ParamTensor& tensor, int row_begin, int row_end) {
    const bool bf16 = model.method.compute == ComputeDtype::bf16;
    const size_t first = static_cast<size_t>(row_begin) * tensor.cols;
    if (tensor.format == WeightFormat::f32 && !bf16) {
        data_ = model.value(tensor) + first;
        return;
    }
    const size_t count = static_cast<size_t>(row_end - row_begin) * tensor.cols;
    scratch_ = Array<float>(MemCategory::scratch, count);
    tensor.traits().read_forward(model.stored(tensor), tensor, first, count, scratch_.data());
    if (bf16) round_to_bf16_in_place(scratch_.data(), count);
    data_ = scratch_.data();
}

LinearInput::LinearInput(const ModelParameters& model, const ParamTensor& weight, float* in, int rows)
    : operand_(in) {
    const size_t count = static_cast<size_t>(rows) * weight.cols;
    if (!weight.quantized()) {
        if (model.method.compute == ComputeDtype::bf16) round_to_bf16_in_place(in, count);
        return;
    }
    integers_ = Array<float>(MemCategory::scratch, count);
    scales_.assign(static_cast<size_t>(rows), 0.0f);
    const int cols = weight.cols;
#pragma omp parallel
    {
        std::vector<int8_t> a(static_cast<size_t>(cols));  // per thread
#pragma omp for schedule(static)
        for (int r = 0; r < rows; ++r) {
            float* x = in + static_cast<size_t>(r) * cols;
            float* integers = integers_.data() + static_cast<size_t>(r) * cols;
            scales_[static_cast<size_t>(r)] = fake_quantize_row(x, cols, a.data());
            for (int j = 0; j < cols; ++j) integers[j] = static_cast<float>(a[j]);
        }
    }
    // Integers up to 128 are exact in bf16: under bf16 compute only the saved a / s is rounded.
    if (model.method.compute == ComputeDtype::bf16) round_to_bf16_in_place(in, count);
    operand_ = integers_.data();
}

namespace {

// Rows per slice in which a weight is read: a quantized embedding-sized weight in
// gradient-piece slices (its dense copy would be as large as an fp32 weight), others whole.
int read_slice_rows(const ParamTensor& weight) { return weight.quantized() ? weight.piece_rows : weight.rows; }

// Rows [row_begin, row_end) of a quantized weight's integer codes q, as floats in scratch.
Array<float> integer_weight_rows(const ModelParameters& model, const ParamTensor& weight, float weight_scale,
                                 int row_begin, int row_end) {
    const size_t count = static_cast<size_t>(row_end - row_begin) * weight.cols;
    Array<int8_t> q(MemCategory::scratch, count);
    weight.traits().read_integers(model.stored(weight), weight, weight_scale, static_cast<size_t>(row_begin) * weight.cols,
                                  count, q.data());
    Array<float> values(MemCategory::scratch, count);
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < count; ++i) values[i] = static_cast<float>(q[i]);
    return values;
}

// The integer product's epilogue: out[r][o] = int8_output_factor(weight_scale, s_r) * out[r][o].
void scale_integer_products(float* out, int rows, int cols, int ld, const LinearInput& in, float weight_scale) {
#pragma omp parallel for schedule(static)
    for (int r = 0; r < rows; ++r) {
        const float factor = int8_output_factor(weight_scale, in.scale(r));
        float* row = out + static_cast<size_t>(r) * ld;
        for (int o = 0; o < cols; ++o) row[o] = factor * row[o];
    }
}

}  // namespace

void weight_linear_forward(const ModelParameters& model, const ParamTensor& weight, float* out, const LinearInput& in,
                           int rows) {
    if (!weight.quantized()) {
        const DenseWeight w(model, weight);
        linear_forward(out, in.operand(), w.data(), rows, weight.cols, weight.rows);
        return;
    }
    require(in.quantized(), "weight_linear_forward: the input of " + weight.name + " was prepared for an fp weight");
    const float weight_scale = weight.traits().weight_scale(model.stored(weight), weight);
    const int slice = read_slice_rows(weight);
    for (int row_begin = 0; row_begin < weight.rows; row_begin += slice) {
        const int row_end = std::min(weight.rows, row_begin + slice);
        const Array<float> q = integer_weight_rows(model, weight, weight_scale, row_begin, row_end);
        // out[:, row_begin:row_end] = a · q[row_begin:row_end]^T: exact integers
        gemm(false, true, rows, row_end - row_begin, weight.cols, 1.0f, in.operand(), weight.cols, q.data(),
             weight.cols, 0.0f, out + row_begin, weight.rows);
        scale_integer_products(out + row_begin, rows, row_end - row_begin, weight.rows, in, weight_scale);
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
    const int slice = read_slice_rows(weight);
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
    if (embedding.format == WeightFormat::f32) {
        embedding_forward(out, tokens, model.value(embedding), count, C);
        return;
    }
    require(C % 4 == 0, "embedding " + embedding.name + ": coded rows must hold whole packed bytes (dim % 4 == 0)");
    const WeightFormatTraits& traits = embedding.traits();
#pragma omp parallel for schedule(static)
    for (int i = 0; i < count; ++i) {
        traits.read_forward(model.stored(embedding), embedding, static_cast<size_t>(tokens[i]) * C, static_cast<size_t>(C),
                            out + static_cast<size_t>(i) * C);
    }
}

}  // namespace dqt
