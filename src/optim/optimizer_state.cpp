#include "optim/optimizer_state.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"

namespace dqt {

StateDtype parse_state_dtype(const std::string& bits) {
    if (bits == "32") return StateDtype::fp32;
    if (bits == "16") return StateDtype::bf16;
    if (bits == "8") return StateDtype::q8;
    throw Error("--optim-state " + bits + " is not supported: use 32 (fp32), 16 (bf16) or 8 (block-wise 8-bit)");
}

const char* state_dtype_bits(StateDtype dtype) {
    switch (dtype) {
        case StateDtype::fp32: return "32";
        case StateDtype::bf16: return "16";
        case StateDtype::q8: return "8";
    }
    return "?";
}

TensorMoments::TensorMoments(size_t first_element, size_t n, StateDtype d, bool with_residual, MemCategory category)
    : dtype(d), first(first_element), count(n) {
    if (with_residual) residual = Array<int8_t>(category, count);
    m = Buffer(category, count * element_bytes());
    v = Buffer(category, count * element_bytes());
    if (dtype == StateDtype::q8) {
        m_absmax = Array<float>(category, blocks());
        v_absmax = Array<float>(category, blocks());
    }
}

size_t TensorMoments::element_bytes() const {
    switch (dtype) {
        case StateDtype::fp32: return 4;
        case StateDtype::bf16: return 2;
        case StateDtype::q8: return 1;
    }
    return 4;
}

namespace {

// The moments of a tensor's 8-bit state or not: small tensors keep fp32 (kSmallTensor).
StateDtype tensor_state_dtype(const ParamTensor& tensor, StateDtype requested) {
    return requested == StateDtype::q8 && tensor.count() < kSmallTensor ? StateDtype::fp32 : requested;
}

}  // namespace

OptimizerState::OptimizerState(const ParamLayout& layout, StateDtype requested, MemCategory category)
    : requested_(requested) {
    tensors_.reserve(layout.tensors.size());
    for (const ParamTensor& tensor : layout.tensors) {
        tensors_.emplace_back(0, tensor.count(), tensor_state_dtype(tensor, requested), tensor.residual_bits > 0,
                              category);
    }
}

void copy_moments_range(const TensorMoments& full, TensorMoments& part) {
    std::copy_n(full.scale_moments, 2, part.scale_moments);
    if (part.count == 0) return;  // a rank that owns none of the tensor: no buffers to copy into
    const size_t bytes = part.element_bytes();
    std::memcpy(part.m.data(), full.m.as<char>() + part.first * bytes, part.count * bytes);
    std::memcpy(part.v.data(), full.v.as<char>() + part.first * bytes, part.count * bytes);
    if (part.residual.size() > 0) std::copy_n(full.residual.data() + part.first, part.count, part.residual.data());
    if (part.dtype == StateDtype::q8) {
        const size_t first_block = part.first / kStateBlock;
        std::copy_n(full.m_absmax.data() + first_block, part.blocks(), part.m_absmax.data());
        std::copy_n(full.v_absmax.data() + first_block, part.blocks(), part.v_absmax.data());
    }
}

OptimizerState::OptimizerState(const ParamLayout& layout, StateDtype requested, const std::vector<ElementRange>& owned)
    : requested_(requested) {
    tensors_.reserve(layout.tensors.size());
    for (const ParamTensor& tensor : layout.tensors) {
        const ElementRange range = owned[static_cast<size_t>(tensor.tensor_id)];
        tensors_.emplace_back(range.first, range.size(), tensor_state_dtype(tensor, requested), tensor.residual_bits > 0);
    }
}

std::string OptimizerState::describe(const ParamLayout& layout) const {
    size_t kept_tensors = 0, kept_values = 0, main_tensors = 0, main_values = 0;
    for (const ParamTensor& tensor : layout.tensors) {
        const bool kept = of(tensor).dtype != requested_;
        (kept ? kept_tensors : main_tensors) += 1;
        (kept ? kept_values : main_values) += of(tensor).count;
    }
    const char* name = requested_ == StateDtype::q8 ? "8-bit block-wise" : requested_ == StateDtype::bf16 ? "bf16" : "fp32";
    std::string text = std::string(name) + " Adam state for " + std::to_string(main_tensors) + " tensors (" +
                       std::to_string(main_values) + " values)";
    if (kept_tensors > 0) {
        text += "; fp32 for " + std::to_string(kept_tensors) + " small tensors (" + std::to_string(kept_values) +
                " values)";
    }
    size_t residual_values = 0;
    int residual_bits = 0;
    for (const ParamTensor& tensor : layout.tensors) {
        residual_values += of(tensor).residual.size();
        residual_bits = std::max(residual_bits, tensor.residual_bits);
    }
    if (residual_values > 0) {
        text += "; " + std::to_string(residual_bits) + "-bit sub-grid residuals of " + std::to_string(residual_values) +
                " coded weights (one byte each)";
    }
    return text;
}

}  // namespace dqt
