#pragma once
// A dqt model as a Hugging Face folder (docs/FORMATS.md, "Hugging Face folders"), which
// import_hf_folder (export/hf_import.h) reads back bit for bit:
//
//   config.json             LlamaForCausalLM (model_type llama), or BitNetForCausalLM
//                           (model_type bitnet) for a SubLN model; the shape keys the importer
//                           reads, initializer_range = init_std, and for a quantized method
//                           "quantization_config": {"quant_method": "dqt", "method": {dqt's
//                           method config}, "weights": ..., "activations": ...} (the two texts
//                           say, for a reader, how the forward reads the weights)
//   model.safetensors       every tensor under its Hugging Face name, F32, q_proj and k_proj
//                           rows in rotate_half's order:
//                             fp and unquantized tensors: the values;
//                             bitnet: the fp32 latents (the forward ternarizes them per tensor
//                               with gamma = mean |W|, online, as transformers' BitNet does);
//                             dqt: NAME.weight the dequantized values codes / s, beside
//                               NAME.weight_codes (I8, the same shape: the integer codes) and
//                               NAME.weight_code_scale (F32, [1]: s, exactly as dqt holds it;
//                               the integer forward multiplies codes by fl(1 / s))
//   tokenizer.model         a BPE model: the sentencepiece model itself
//   tokenizer.json          a byte-level BPE read from one: that file as it was; a byte model:
//                           byte-level BPE with the 256 byte symbols, no merges
//   tokenizer_config.json, generation_config.json
// The folder is written beside its destination and renamed into place, so an interrupted
// export leaves no half-written folder; an existing non-empty destination is refused.
#include <string>

#include "data/special_tokens.h"
#include "data/tokenizer.h"
#include "model/parameters.h"

namespace dqt {

struct HfExportSummary {
    std::string architecture;  // "LlamaForCausalLM" or "BitNetForCausalLM"
    size_t tensors = 0;        // in model.safetensors
    size_t bytes = 0;          // of model.safetensors
};

// special: an imported model's BOS and EOS ids (config.json, generation_config.json) and whether
// prompts start with BOS (tokenizer_config.json's add_bos_token); none for a model dqt trained.
HfExportSummary export_hf_folder(const ModelParameters& model, const Tokenizer& tokenizer, const SpecialTokens& special,
                                 const std::string& folder);

}  // namespace dqt
