#pragma once
// A GGUF file opened as a model, whichever tool wrote it: dqt (export/gguf_model.h) or
// llama.cpp (export/llamacpp_gguf.h). Both open_gguf and open_llamacpp_gguf return it.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data/special_tokens.h"
#include "data/tokenizer.h"
#include "model/parameters.h"
#include "model/tensor_source.h"

namespace dqt {

// Its tokenizer and header read, each tensor read when asked (model/tensor_source.h). An
// inference model built from `tensors` is the only copy of the weights a load makes
// (infer/inference_model.h).
struct OpenedGguf {
    std::unique_ptr<TensorSource> tensors;
    std::unique_ptr<Tokenizer> tokenizer;
    std::string data_dir;  // dqt.data_dir: the dataset the model was trained on; empty when the export named none
    SpecialTokens special;  // BOS and end-of-generation tokens (none for a model dqt trained)
};

// A tensor's GGUF shape (ne: the contiguous dimension first).
inline std::vector<int64_t> gguf_shape(const ParamTensor& t) {
    if (!t.is_matrix()) return {t.cols};
    return {t.cols, t.rows};
}

}  // namespace dqt
