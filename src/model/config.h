#pragma once
// Shape of a LLaMA-structured decoder (docs/METHOD.md section 1), set by JSON and/or CLI flags.
#include <cstdint>
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "kernels/swiglu.h"

namespace dqt {

// The longest context dqt accepts (a stated limit, so that a crafted seq_len in a checkpoint or
// GGUF file cannot size a cache or a rotary table of billions of positions; and positions,
// padded to tiles, stay well inside int).
constexpr int kMaxSeqLen = 1 << 20;

struct ModelConfig {
    int dim = 256;          // hidden size C
    int n_layers = 4;
    int n_heads = 4;
    int n_kv_heads = 4;     // < n_heads for grouped-query attention
    int ffn_dim = 768;      // FFN inner size F: LLaMA's 8/3 C rounded up to a multiple of 256, the
                            // row length of llama.cpp's ternary blocks (so down_proj exports as TQ2_0)
    GatedActivation ffn_activation = GatedActivation::silu;  // SwiGLU, or ReLU^2-GLU (BitNet b1.58 2B4T)
    int vocab_size = 256;   // byte-level by default
    int seq_len = 256;      // context length T used in training, at most kMaxSeqLen
    bool subln = true;      // extra RMSNorm before o_proj and down_proj (DQT / BitNet code)
    bool tie_embeddings = true;   // the lm_head reads token_embd: llama.cpp's bitnet graph (a SubLN
                                  // model's) has no separate head, so an untied SubLN model cannot go there
    float rope_theta = 10000.0f;
    float norm_eps = 1e-5f;
    float init_std = 0.02f;

    int head_dim() const { return dim / n_heads; }
    int kv_dim() const { return n_kv_heads * head_dim(); }
    // Throws dqt::Error naming the first impossible setting.
    void validate() const;
    // Number of parameters of the whole model (embedding and head included).
    int64_t parameter_count() const;
    // Training FLOPs per token for forward + backward (6 per weight per token, plus
    // causal attention: 6 * L * T * C on average), used for GFLOP/s reports.
    double train_flops_per_token() const;
};

void to_json(nlohmann::json& j, const ModelConfig& config);
void from_json(const nlohmann::json& j, ModelConfig& config);
// Reads a model config JSON file as raw JSON (keys checked when converted with from_json:
// unknown keys are an error, so a typo never silently falls back to a default).
nlohmann::json load_model_config_json(const std::string& path);

}  // namespace dqt
