#pragma once
// Tensor names of Hugging Face's LLaMA layout against dqt's (GGUF-like) names, shared by the
// importer and the exporter of Hugging Face folders.
#include <string>

namespace dqt {

// "blk.3.attn_q" -> "model.layers.3.self_attn.q_proj.weight", "token_embd" ->
// "model.embed_tokens.weight", "output" -> "lm_head.weight", ...
std::string hf_tensor_name(const std::string& name);

// Whether the tensor's rows are in rotate_half's order in the file (q_proj and k_proj):
// export/rope_rows.h permutes them.
inline bool hf_rope_permuted(const std::string& name) {
    return name.ends_with(".attn_q") || name.ends_with(".attn_k");
}

}  // namespace dqt
