#pragma once
// Token-by-token inference with a KV cache (generation), and sampling from logits.
#include <cstdint>
#include <vector>

#include "core/memory.h"
#include "model/parameters.h"

namespace dqt {

// Keys and values of every layer for positions [0, length).
struct KvCache {
    int max_seq = 0;
    int length = 0;                 // positions filled
    std::vector<Array<float>> keys;   // per layer (max_seq, Hkv, D), after RoPE
    std::vector<Array<float>> values; // per layer (max_seq, Hkv, D)
    KvCache(const ModelConfig& config, int max_seq);
};

// Per-token scratch of the decode path (category scratch).
struct DecodeScratch {
    Array<float> x, normed, q, att, att_sub, proj, gate, up, h, h_sub, rstd;
    Array<float> logits;  // (V)
    explicit DecodeScratch(const ModelConfig& config);
};

// Runs one token at position cache.length, appends its keys/values, and leaves the
// next-token logits in scratch.logits.
void decode_token(const ModelParameters& model, KvCache& cache, DecodeScratch& scratch, int32_t token);

// Runs a prompt of `count` tokens into an empty cache in one batched causal forward (the
// prompt shape: matrix-matrix products), stores their keys and values, and leaves the last
// position's next-token logits in scratch.logits. Same result as decode_token per token.
void prefill(const ModelParameters& model, KvCache& cache, DecodeScratch& scratch, const int32_t* tokens, int count);

struct SamplingOptions {
    float temperature = 0.8f;  // 0 = greedy
    int top_k = 40;            // 0 = no limit
    float top_p = 0.95f;       // 1 = no nucleus cut
    uint64_t seed = 1;
};

// Picks a token from logits (V); u in [0, 1) is the one random draw it uses.
int32_t sample_token(const float* logits, int vocab, const SamplingOptions& options, float u);

}  // namespace dqt
