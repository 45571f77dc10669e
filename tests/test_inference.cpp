// Generation path: the KV-cache decode against the training forward, and sampling rules.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "core/error.h"
#include "core/rng.h"
#include "model/inference.h"
#include "model/llama.h"

using namespace dqt;

namespace {

ModelConfig small_config(bool subln, int kv_heads) {
    ModelConfig c;
    c.dim = 32;
    c.n_layers = 2;
    c.n_heads = 4;
    c.n_kv_heads = kv_heads;
    c.ffn_dim = 40;
    c.vocab_size = 23;
    c.seq_len = 12;
    c.subln = subln;
    c.init_std = 0.2f;
    return c;
}

}  // namespace

// Feeding tokens one by one through the KV cache must give, at every position, the logits the
// full causal forward gives at that position (float32 in both, different summation orders).
TEST(Inference, KvCacheDecodeMatchesFullForwardAtEveryPosition) {
    for (const auto& [subln, kv_heads] : {std::pair{true, 4}, std::pair{false, 2}}) {
        const ModelConfig config = small_config(subln, kv_heads);
        ModelParameters model(config);
        const uint64_t seed = std::random_device{}();
        SCOPED_TRACE("seed " + std::to_string(seed) + " subln " + std::to_string(subln));
        model.initialize(seed);

        Activations acts(config, 1, config.seq_len);
        for (int t = 0; t < config.seq_len; ++t)
            acts.tokens[t] = static_cast<int32_t>(random_u64(seed, kStreamBatch, 0, t) % config.vocab_size);
        model_forward(model, acts, false);

        KvCache cache(config, config.seq_len);
        DecodeScratch scratch(config);
        for (int t = 0; t < config.seq_len; ++t) {
            decode_token(model, cache, scratch, acts.tokens[t]);
            for (int v = 0; v < config.vocab_size; ++v) {
                const float full = acts.logits[static_cast<size_t>(t) * config.vocab_size + v];
                ASSERT_NEAR(scratch.logits[v], full, 1e-4f + 1e-4f * std::fabs(full)) << "position " << t;
            }
        }
        EXPECT_EQ(cache.length, config.seq_len);
        EXPECT_THROW(decode_token(model, cache, scratch, 0), Error);  // context full
    }
}

// A batched prefill leaves the cache and the logits that token-by-token decoding leaves.
TEST(Inference, PrefillMatchesTokenByTokenDecoding) {
    const ModelConfig config = small_config(true, 2);
    ModelParameters model(config);
    const uint64_t seed = std::random_device{}();
    SCOPED_TRACE("seed " + std::to_string(seed));
    model.initialize(seed);
    std::vector<int32_t> prompt(7);
    for (size_t t = 0; t < prompt.size(); ++t)
        prompt[t] = static_cast<int32_t>(random_u64(seed, kStreamBatch, 0, t) % config.vocab_size);
    KvCache stepwise(config, config.seq_len), batched(config, config.seq_len);
    DecodeScratch a(config), b(config);
    for (int32_t token : prompt) decode_token(model, stepwise, a, token);
    prefill(model, batched, b, prompt.data(), static_cast<int>(prompt.size()));
    EXPECT_EQ(batched.length, stepwise.length);
    for (int v = 0; v < config.vocab_size; ++v) ASSERT_NEAR(b.logits[v], a.logits[v], 1e-4f + 1e-4f * std::fabs(a.logits[v]));
    for (int l = 0; l < config.n_layers; ++l)
        for (size_t i = 0; i < prompt.size() * config.kv_dim(); ++i) {
            ASSERT_NEAR(batched.keys[l][i], stepwise.keys[l][i], 1e-4f) << "layer " << l;
            ASSERT_NEAR(batched.values[l][i], stepwise.values[l][i], 1e-4f) << "layer " << l;
        }
    // Decoding goes on from either cache alike.
    decode_token(model, stepwise, a, 3);
    decode_token(model, batched, b, 3);
    for (int v = 0; v < config.vocab_size; ++v) ASSERT_NEAR(b.logits[v], a.logits[v], 1e-4f + 1e-4f * std::fabs(a.logits[v]));
    KvCache used(config, config.seq_len);
    decode_token(model, used, a, 1);
    EXPECT_THROW(prefill(model, used, b, prompt.data(), 2), Error);  // not empty
}

TEST(Inference, DecodeRejectsTokenOutsideVocabulary) {
    const ModelConfig config = small_config(true, 4);
    ModelParameters model(config);
    model.initialize(1);
    KvCache cache(config, 4);
    DecodeScratch scratch(config);
    EXPECT_THROW(decode_token(model, cache, scratch, config.vocab_size), Error);
    EXPECT_THROW(decode_token(model, cache, scratch, -1), Error);
}

TEST(Sampling, GreedyPicksTheLargestLogit) {
    const std::vector<float> logits = {0.1f, 2.0f, -1.0f, 1.9f};
    SamplingOptions greedy;
    greedy.temperature = 0.0f;
    for (float u : {0.0f, 0.5f, 0.999f}) EXPECT_EQ(sample_token(logits.data(), 4, greedy, u), 1);
}

// With top-k 2, only the two likeliest tokens can be drawn, whatever u is; their frequencies
// over a uniform grid of u follow the renormalised softmax.
TEST(Sampling, TopKRestrictsAndFollowsTheSoftmax) {
    const std::vector<float> logits = {0.0f, 1.0f, 0.5f, -2.0f, 0.9f};
    SamplingOptions options;
    options.temperature = 1.0f;
    options.top_k = 2;
    options.top_p = 1.0f;
    const int draws = 100000;
    std::vector<int> counts(5, 0);
    for (int i = 0; i < draws; ++i) ++counts[sample_token(logits.data(), 5, options, (i + 0.5f) / draws)];
    EXPECT_EQ(counts[0] + counts[2] + counts[3], 0);
    const double p1 = std::exp(1.0) / (std::exp(1.0) + std::exp(0.9));
    EXPECT_NEAR(counts[1] / double(draws), p1, 1e-3);
}

// top-p keeps the smallest prefix of the sorted distribution whose mass reaches p.
TEST(Sampling, TopPKeepsTheSmallestSufficientPrefix) {
    // Probabilities at temperature 1: about 0.665, 0.245, 0.090.
    const std::vector<float> logits = {2.0f, 1.0f, 0.0f};
    SamplingOptions options;
    options.temperature = 1.0f;
    options.top_k = 0;
    options.top_p = 0.8f;  // needs the first two
    std::vector<int> counts(3, 0);
    for (int i = 0; i < 10000; ++i) ++counts[sample_token(logits.data(), 3, options, (i + 0.5f) / 10000)];
    EXPECT_EQ(counts[2], 0);
    EXPECT_GT(counts[1], 0);
    options.top_p = 0.5f;  // the first alone suffices
    for (float u : {0.0f, 0.7f, 0.999f}) EXPECT_EQ(sample_token(logits.data(), 3, options, u), 0);
}
