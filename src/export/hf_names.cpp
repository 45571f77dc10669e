#include "export/hf_names.h"

#include <map>

namespace dqt {

std::string hf_tensor_name(const std::string& name) {
    if (name == "token_embd") return "model.embed_tokens.weight";
    if (name == "output_norm") return "model.norm.weight";
    if (name == "output") return "lm_head.weight";
    static const std::map<std::string, std::string> block = {
        {"attn_norm", "input_layernorm"},       {"attn_q", "self_attn.q_proj"},
        {"attn_k", "self_attn.k_proj"},         {"attn_v", "self_attn.v_proj"},
        {"attn_sub_norm", "self_attn.attn_sub_norm"}, {"attn_output", "self_attn.o_proj"},
        {"ffn_norm", "post_attention_layernorm"}, {"ffn_gate", "mlp.gate_proj"},
        {"ffn_up", "mlp.up_proj"},              {"ffn_sub_norm", "mlp.ffn_sub_norm"},
        {"ffn_down", "mlp.down_proj"}};
    const size_t dot = name.find('.', 4);  // "blk.L.kind"
    return "model.layers." + name.substr(4, dot - 4) + "." + block.at(name.substr(dot + 1)) + ".weight";
}

}  // namespace dqt
