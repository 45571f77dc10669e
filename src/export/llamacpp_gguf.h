#pragma once
// A LLaMA GGUF file that dqt did not write: llama.cpp's convert_hf_to_gguf.py output and what
// llama-quantize makes of it (docs/FORMATS.md, "GGUF files from llama.cpp").
//
//   architecture  `llama` (its rotary pairs are dqt's adjacent pairs: no row permutation);
//                 llama.embedding_length, block_count, attention.head_count(_kv),
//                 feed_forward_length, context_length, rope.freq_base (10000),
//                 attention.layer_norm_rms_epsilon (1e-5); rope.dimension_count must be the
//                 head size; rope scaling and any tensor dqt's model has no place for (biases,
//                 rope_freqs) are refused
//   tensors       F32, F16, Q8_0, TQ1_0, TQ2_0, each block's scale d applied; without
//                 output.weight the head is tied to token_embd. Where every block linear is
//                 TQ1_0/TQ2_0 with one d per matrix (a ternary model's weights: codes times
//                 one scale), the model is read as ternary dqt (codes, scale 1/d) and runs on
//                 the ternary kernels; otherwise as an fp model of the dequantized values
//   tokenizer     tokenizer.ggml.model "llama" (sentencepiece BPE: tokens, scores, token_type,
//                 add_space_prefix, absent = true as llama.cpp reads it: LLaMA's dummy prefix;
//                 data/sentencepiece_proto.h); "gpt2" (byte-level BPE: tokens, token_type,
//                 merges) with pre-tokenizer llama-bpe (LLaMA 3's) or gpt-2, or the 256 byte
//                 symbols without merges (dqt's byte tokenizer)
// The file is untrusted: every tensor the config implies is checked in the file's table, with
// its shape, before anything is allocated, so what is allocated is bounded by the file.
#include "export/opened_gguf.h"
#include "io/gguf.h"

namespace dqt {

// reader: a GGUF file without dqt's own keys.
OpenedGguf open_llamacpp_gguf(GgufReader reader);

}  // namespace dqt
