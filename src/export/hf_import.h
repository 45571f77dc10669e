#pragma once
// A LLaMA-family model in Hugging Face's layout, read into a dqt model: a folder with
// config.json, model.safetensors or its shards with model.safetensors.index.json, and a
// sentencepiece tokenizer.model or a byte-level BPE tokenizer.json (data/byte_level_bpe.h;
// dqt's byte vocabulary is read as its byte tokenizer) (docs/FORMATS.md, "Hugging Face folders").
//
//   config.json   hidden_size, num_hidden_layers, num_attention_heads, intermediate_size,
//                 vocab_size; num_key_value_heads (default: the heads), rms_norm_eps (1e-6),
//                 rope_theta (10000), hidden_act silu or relu2 (BitNet b1.58 2B4T's squared
//                 ReLU), tie_word_embeddings (false), max_position_embeddings (the context,
//                 at most 4096 here), initializer_range (0.02); rope_scaling is refused; a
//                 quantization_config other than dqt's own (export/hf_export.h) is refused,
//                 dqt's gives the method and its coded tensors
//   tensors       F32, F16 or BF16, read as fp32; q_proj and k_proj rows go from
//                 rotate_half's order to dqt's adjacent pairs (export/rope_rows.h); a model
//                 with attn_sub_norm and ffn_sub_norm (BitNet's) is a SubLN model
// Every file is untrusted: names, shapes and shard files are checked against the config, the
// config's size against this machine's memory before anything is allocated, and each problem
// is one dqt::Error naming the file.
#include <memory>
#include <string>

#include "data/special_tokens.h"
#include "data/tokenizer.h"
#include "model/parameters.h"

namespace dqt {

// A folder holding config.json.
bool is_hf_folder(const std::string& path);

struct ImportedHf {
    std::unique_ptr<ModelParameters> model;  // fp, or the method of a dqt export
    std::unique_ptr<Tokenizer> tokenizer;
    SpecialTokens special;  // config.json's and generation_config.json's ids, tokenizer_config.json's add_bos_token
};

ImportedHf import_hf_folder(const std::string& folder);

// The folder's tokenizer alone (config.json's vocab_size checks it; no weight is read).
std::unique_ptr<Tokenizer> import_hf_tokenizer(const std::string& folder);

}  // namespace dqt
