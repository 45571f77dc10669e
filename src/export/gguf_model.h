#pragma once
// A dqt model as a GGUF file that llama.cpp runs (docs/FORMATS.md, "GGUF export"), and back.
//
// Architecture: llama.cpp's `bitnet` graph is ours with SubLN (RMSNorm before o_proj and
// down_proj, silu(gate) * up); it reads the output head from token_embd, so a SubLN model must
// have tied embeddings. Without SubLN the `llama` graph fits, tied or not. `bitnet` rotates
// (x[i], x[i + d/2]) (NEOX) where dqt rotates adjacent pairs: the rows of attn_q and attn_k
// are permuted inside each head on export (and back on import), which leaves q.k unchanged.
//
// Weights: every quantized block linear is stored as its integer codes with the scale in the
// optional `<name>.scale` tensor both graphs multiply in after the matmul (W = q * gamma exact,
// no fp16 block scale in the way):
//   ternary (dqt 1.58, bitnet via absmean, any dqt model with --ternary): TQ2_0 or TQ1_0 with
//       block scale 1 (0 for an all-zero block), F32 integers where a row is not a multiple of 256;
//   dqt 2..8 bits: Q8_0 with block scale 1 (rows a multiple of 32), else F32 integers;
//   fp32 tensors: F32, or F16 on request. Norms are always F32. A quantized embedding or head
//       (no scale tensor exists for them in llama.cpp) is written as its dequantized values.
// dqt's own keys (dqt.*) carry the model and method config, the exact per-tensor code scales
// and the tokenizer, so importing an export gives back the same codes and values bit for bit.
#include <memory>
#include <string>
#include <vector>

#include "data/special_tokens.h"
#include "data/tokenizer.h"
#include "export/opened_gguf.h"
#include "io/gguf.h"
#include "model/parameters.h"

namespace dqt {

enum class GgufTernaryFormat { tq2_0, tq1_0 };
enum class GgufFloatFormat { f32, f16 };

struct GgufExportOptions {
    GgufTernaryFormat ternary = GgufTernaryFormat::tq2_0;
    GgufFloatFormat floats = GgufFloatFormat::f32;
    std::string data_dir;  // the dataset the model was trained on (dqt.data_dir: `dqt eval`'s default)
    SpecialTokens special;  // an imported model's BOS and end-of-generation tokens (none: dqt's defaults)
};

struct GgufExportSummary {
    std::string architecture;                      // "bitnet" or "llama"
    std::vector<GgmlType> tensor_types;            // of every tensor, in file order
    int ternary_fallbacks = 0;                     // ternary tensors written as F32 (ragged rows)
};

// model: fp, or dqt at any width (a bitnet model is exported through convert_to_ternary).
// dqt::Error, with nothing written, when llama.cpp's graphs cannot express the model.
GgufExportSummary export_gguf(const ModelParameters& model, const Tokenizer& tokenizer,
                              const GgufExportOptions& options, const std::string& path);

// Opens a GGUF file that dqt wrote, or a LLaMA GGUF from llama.cpp's tools (no dqt.* keys:
// export/llamacpp_gguf.h). Every tensor the header describes is checked in the file's table, with
// its shape, before anything is allocated; dqt::Error, one line, for what it cannot read or any
// damage (a tensor's damage when it is read).
OpenedGguf open_gguf(const std::string& path);

struct ImportedGguf {
    std::unique_ptr<ModelParameters> model;
    std::unique_ptr<Tokenizer> tokenizer;
    std::string data_dir;  // dqt.data_dir: the dataset the model was trained on; empty when the export named none
    SpecialTokens special;  // BOS and end-of-generation tokens (none for a model dqt trained)
};

// open_gguf's file read whole into ModelParameters (to train on, convert or export it).
ImportedGguf import_gguf(const std::string& path);

}  // namespace dqt
