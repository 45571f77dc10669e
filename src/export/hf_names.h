#pragma once
// How a dqt tensor appears in a Hugging Face folder, shared by the importer and the exporter:
// its name in Hugging Face's LLaMA layout, the names of the codes and scale a dqt export puts
// beside it, its shape and its row order.
#include <cstdint>
#include <string>
#include <vector>

#include "model/parameters.h"

namespace dqt {

// "blk.3.attn_q" -> "model.layers.3.self_attn.q_proj.weight", "token_embd" ->
// "model.embed_tokens.weight", "output" -> "lm_head.weight", ...
std::string hf_tensor_name(const std::string& name);

// A coded tensor's integer codes (I8, its shape) and scale s (F32, [1]) in a dqt export:
// "model.layers.3.self_attn.q_proj.weight_codes", "..._proj.weight_code_scale".
inline std::string hf_codes_name(const std::string& name) { return hf_tensor_name(name) + "_codes"; }
inline std::string hf_code_scale_name(const std::string& name) { return hf_tensor_name(name) + "_code_scale"; }

// [rows, cols] for a matrix, [cols] for a norm gain.
inline std::vector<int64_t> hf_tensor_shape(const ParamTensor& tensor) {
    if (tensor.is_matrix()) return {tensor.rows, tensor.cols};
    return {tensor.cols};
}

// Whether the tensor's rows are in rotate_half's order in the file (q_proj and k_proj):
// export/rope_rows.h permutes them.
inline bool hf_rope_permuted(const std::string& name) {
    return name.ends_with(".attn_q") || name.ends_with(".attn_k");
}

}  // namespace dqt
