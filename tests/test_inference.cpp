// The inference engine (infer/) against the training forward: for every method the full
// forward of a sequence, token-by-token decoding and a prompt followed by decoding; what each
// method's linears become; bad input; memory of evaluation; and sampling rules.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/float16.h"
#include "core/memory.h"
#include "core/rng.h"
#include "data/dataset.h"
#include "infer/evaluate.h"
#include "infer/generate.h"
#include "infer/inference_model.h"
#include "infer/logprobs.h"
#include "infer/sampling.h"
#include "infer/session.h"
#include "infer/ternary_layout.h"
#include "kernels/attention.h"
#include "model/initialization.h"
#include "model/llama.h"
#include "test_helpers.h"

using namespace dqt;
using dqt::testing::test_seed;

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
    c.tie_embeddings = false;  // a head of its own, quantized or not as the method says
    c.init_std = 0.2f;
    return c;
}

MethodConfig method_of(Method method, int bits, bool quantize_ends = false) {
    MethodConfig m;
    m.kind = method;
    m.grid.bits = bits;
    m.quantize_head = quantize_ends;
    m.quantize_embedding = quantize_ends && method == Method::dqt;
    m.validate();
    return m;
}

struct Case {
    const char* name;
    MethodConfig method;
    bool subln;
    int kv_heads;
    bool integer_exact;  // every product an exact integer sum: the logits must agree bit for bit
};

std::vector<Case> every_method() {
    return {
        {"fp", method_of(Method::fp, 1), true, 4, false},
        {"fp no-subln gqa", method_of(Method::fp, 1), false, 2, false},
        {"bitnet", method_of(Method::bitnet, 1), true, 4, true},
        {"bitnet gqa quantized head", method_of(Method::bitnet, 1, true), true, 2, true},
        {"dqt 1.58", method_of(Method::dqt, 1), true, 4, true},
        {"dqt 1.58 no-subln quantized ends", method_of(Method::dqt, 1, true), false, 2, true},
        {"dqt 8", method_of(Method::dqt, 8), true, 4, false},
        {"dqt 4 quantized ends", method_of(Method::dqt, 4, true), true, 2, false},
    };
}

std::vector<int32_t> random_tokens(uint64_t seed, int count, int vocab) {
    std::vector<int32_t> tokens(static_cast<size_t>(count));
    for (int t = 0; t < count; ++t) tokens[t] = static_cast<int32_t>(random_u64(seed, kStreamBatch, 1, t) % vocab);
    return tokens;
}

// The training forward's logits (T, V) of one sequence.
std::vector<float> training_logits(const ModelParameters& model, const std::vector<int32_t>& tokens) {
    Activations acts(model.config, 1, static_cast<int>(tokens.size()));
    std::memcpy(acts.tokens.data(), tokens.data(), tokens.size() * sizeof(int32_t));
    model_forward(model, acts, false);
    return std::vector<float>(acts.logits.begin(), acts.logits.end());
}

void expect_logits(const float* got, const float* expected, size_t count, bool exact, const std::string& what) {
    for (size_t i = 0; i < count; ++i) {
        if (exact) {
            ASSERT_EQ(got[i], expected[i]) << what << ", logit " << i;
        } else {
            ASSERT_NEAR(got[i], expected[i], 1e-4f + 1e-4f * std::fabs(expected[i])) << what << ", logit " << i;
        }
    }
}

}  // namespace

// The inference forward of a whole sequence against model_forward: ternary models bit for bit
// (integer kernels on the training forward's integers, the same kernels elsewhere), the others
// to float tolerance (gemm and int8 sums in other orders).
TEST(Inference, FullForwardMatchesTheTrainingForwardForEveryMethod) {
    const uint64_t seed = test_seed();
    SCOPED_TRACE("DQT_TEST_SEED=" + std::to_string(seed));
    for (const Case& c : every_method()) {
        SCOPED_TRACE(c.name);
        const ModelConfig config = small_config(c.subln, c.kv_heads);
        for (uint64_t model_index = 0; model_index < 4; ++model_index) {
            ModelParameters parameters(config, c.method);
            initialize_parameters(parameters, seed + model_index);
            const std::vector<int32_t> tokens = random_tokens(seed + model_index, config.seq_len, config.vocab_size);
            const std::vector<float> expected = training_logits(parameters, tokens);
            const InferenceModel model(parameters);
            InferenceSession session(model, config.seq_len);
            const float* logits = session.run(tokens.data(), config.seq_len, LogitRows::all);
            expect_logits(logits, expected.data(), expected.size(), c.integer_exact, "full forward");
        }
    }
}

// A ReLU^2-GLU model (BitNet b1.58 2B4T's FFN) runs the same activation in inference: a ternary
// one's logits equal the training forward's bit for bit, over the prompt and in decode.
TEST(Inference, AReluSquaredModelMatchesItsTrainingForward) {
    const uint64_t seed = test_seed();
    SCOPED_TRACE("DQT_TEST_SEED=" + std::to_string(seed));
    ModelConfig config = small_config(true, 2);
    config.ffn_activation = GatedActivation::relu2;
    ModelParameters parameters(config, method_of(Method::dqt, 1, true));
    initialize_parameters(parameters, seed + 3);
    const std::vector<int32_t> tokens = random_tokens(seed + 3, config.seq_len, config.vocab_size);
    const std::vector<float> expected = training_logits(parameters, tokens);
    ModelConfig silu_config = config;
    silu_config.ffn_activation = GatedActivation::silu;
    ModelParameters silu(silu_config, method_of(Method::dqt, 1, true));
    initialize_parameters(silu, seed + 3);
    EXPECT_NE(training_logits(silu, tokens), expected) << "the activation changed nothing";
    const InferenceModel model(parameters);
    InferenceSession whole(model, config.seq_len);
    expect_logits(whole.run(tokens.data(), config.seq_len, LogitRows::all), expected.data(), expected.size(), true,
                  "full forward");
    InferenceSession stepwise(model, config.seq_len);
    for (int t = 0; t < config.seq_len; ++t) {
        expect_logits(stepwise.run(&tokens[t], 1, LogitRows::last), &expected[static_cast<size_t>(t) * config.vocab_size],
                      config.vocab_size, true, "decode at " + std::to_string(t));
    }
}

// Token-by-token decoding, and a prompt followed by decoding, give the full forward's logits at
// every position, with every cache type: decode attention runs the full forward's multiply-add
// chains over what the cache holds, so the hidden states of a ternary model agree bit for bit;
// so do its logits when the head is quantized (a dense head is a gemm of 1 row instead of T,
// rounded in another order). fp16 and int8 caches stay close to the fp32 one.
TEST(Inference, DecodingMatchesTheFullForwardAtEveryPosition) {
    const uint64_t seed = test_seed();
    SCOPED_TRACE("DQT_TEST_SEED=" + std::to_string(seed));
    for (const Case& c : every_method()) {
        const ModelConfig config = small_config(c.subln, c.kv_heads);
        const int V = config.vocab_size, T = config.seq_len;
        const size_t TV = static_cast<size_t>(T) * V;
        ModelParameters parameters(config, c.method);
        initialize_parameters(parameters, seed);
        const std::vector<int32_t> tokens = random_tokens(seed, T, V);
        const InferenceModel model(parameters);
        std::vector<float> f32_logits;
        for (KvCacheType cache : {KvCacheType::f32, KvCacheType::f16, KvCacheType::int8}) {
            SCOPED_TRACE(std::string(c.name) + ", cache " + kv_cache_type_name(cache));
            InferenceSession full(model, T, cache);
            const float* full_logits = full.run(tokens.data(), T, LogitRows::all);
            const std::vector<float> expected(full_logits, full_logits + TV);
            if (cache == KvCacheType::f32) f32_logits = expected;
            // fp16 and int8 keys and values round the attention a little, and where an int8
            // activation then lands on the other side of a rounding step one logit moves by a
            // whole step (up to 0.16 on these models): the bound is on the RMS difference,
            // relative to the logits' RMS. Over 40 seeds of every method at most 1.9% with fp16
            // (fp 0.08%) and 3.5% with int8 (fp 1.4%).
            double difference_squares = 0.0, logit_squares = 0.0;
            for (size_t i = 0; i < TV; ++i) {
                difference_squares += std::pow(static_cast<double>(expected[i]) - f32_logits[i], 2);
                logit_squares += std::pow(static_cast<double>(f32_logits[i]), 2);
            }
            ASSERT_LE(std::sqrt(difference_squares / logit_squares), cache == KvCacheType::int8 ? 0.05 : 0.03)
                << "cache against fp32";
            const bool exact = c.integer_exact && c.method.quantize_head;

            InferenceSession stepwise(model, T, cache);
            for (int t = 0; t < T; ++t) {
                const float* logits = stepwise.run(&tokens[t], 1, LogitRows::last);
                expect_logits(logits, &expected[static_cast<size_t>(t) * V], V, exact,
                              "decode at position " + std::to_string(t));
            }
            EXPECT_EQ(stepwise.position(), T);
            EXPECT_THROW(stepwise.run(tokens.data(), 1, LogitRows::last), Error);  // context full

            for (int prompt : {1, 5}) {
                InferenceSession prompted(model, T, cache);
                const float* logits = prompted.run(tokens.data(), prompt, LogitRows::last);
                expect_logits(logits, &expected[static_cast<size_t>(prompt - 1) * V], V, exact, "prompt");
                // Several tokens after a prompt at once (n > 1 at p > 0) as well.
                logits = prompted.run(&tokens[prompt], T - prompt, LogitRows::all);
                expect_logits(logits, &expected[static_cast<size_t>(prompt) * V], static_cast<size_t>(T - prompt) * V,
                              exact, "after a prompt of " + std::to_string(prompt));
            }
        }
    }
}

// A batch of sequences at different positions, one token each, with a new prompt's chunks among
// them, gives every sequence the logits its own run gives, bit for bit, for every method and
// cache type: what lets the server batch requests without changing a token (serve/engine.h).
TEST(Inference, ABatchGivesEachSequenceTheLogitsOfItsOwnRun) {
    const uint64_t seed = test_seed();
    SCOPED_TRACE("DQT_TEST_SEED=" + std::to_string(seed));
    const std::vector<int> prompts = {1, 4, 2, 7};
    for (const Case& c : every_method()) {
        const ModelConfig config = small_config(c.subln, c.kv_heads);
        const int V = config.vocab_size, T = config.seq_len;
        ModelParameters parameters(config, c.method);
        initialize_parameters(parameters, seed + 7);
        const InferenceModel model(parameters);
        // Three threads do not divide the GQA models' two kv heads: the batch's q, k and v rows
        // are then split evenly and the threads meet before attending.
        for (const std::pair<KvCacheType, int>& setting :
             {std::pair{KvCacheType::f32, 2}, std::pair{KvCacheType::f16, 2}, std::pair{KvCacheType::int8, 2},
              std::pair{KvCacheType::f32, 3}}) {
            // Plain variables, not a structured binding: C++17 lambdas cannot capture those (clang refuses).
            const KvCacheType cache = setting.first;
            const int threads = setting.second;
            SCOPED_TRACE(std::string(c.name) + ", cache " + kv_cache_type_name(cache) + ", threads " +
                         std::to_string(threads));
            dqt::testing::with_threads(threads, [&] {
                std::vector<std::unique_ptr<InferenceSession>> batched, alone;
                std::vector<std::vector<int32_t>> tokens;
                for (size_t s = 0; s < prompts.size(); ++s) {
                    tokens.push_back(random_tokens(seed + 100 + s, T, V));
                    batched.push_back(std::make_unique<InferenceSession>(model, T, cache));
                    alone.push_back(std::make_unique<InferenceSession>(model, T, cache));
                    batched.back()->run(tokens[s].data(), prompts[s], LogitRows::last);
                    alone.back()->run(tokens[s].data(), prompts[s], LogitRows::last);
                }
                // A newcomer's prompt runs kChunk tokens a step, second among the batch's parts,
                // keeping every row's logits on odd steps. The steps run alternately in the first
                // part's scratch and in a session that is no part, reserved for them beforehand.
                constexpr int kChunk = 2;
                const size_t newcomer = prompts.size();
                tokens.push_back(random_tokens(seed + 100 + newcomer, T, V));
                batched.push_back(std::make_unique<InferenceSession>(model, T, cache));
                alone.push_back(std::make_unique<InferenceSession>(model, T, cache));
                const int largest_step = static_cast<int>(prompts.size()) + kChunk;
                InferenceSession spare(model, T, cache);
                spare.reserve(largest_step, largest_step);
                const size_t reserved = spare.scratch_bytes();
                for (int step = 0; step < 4; ++step) {
                    const LogitRows chunk_logits = step % 2 ? LogitRows::all : LogitRows::last;
                    std::vector<size_t> order;  // the sequence of each part
                    std::vector<InferenceSession::BatchPart> parts;
                    for (size_t s = 0; s < prompts.size(); ++s) {
                        parts.push_back({batched[s].get(), &tokens[s][static_cast<size_t>(prompts[s] + step)], 1});
                        order.push_back(s);
                        if (s != 0) continue;
                        parts.push_back(
                            {batched[newcomer].get(), &tokens[newcomer][step * kChunk], kChunk, chunk_logits});
                        order.push_back(newcomer);
                    }
                    InferenceSession& workspace = step % 2 ? spare : *batched[0];
                    const size_t kept_rows = parts.size() + (chunk_logits == LogitRows::all ? kChunk - 1 : 0);
                    const float* logits = InferenceSession::run_batch(workspace, parts);
                    const std::vector<float> got(logits, logits + kept_rows * V);
                    size_t row = 0;
                    for (size_t i = 0; i < parts.size(); ++i) {
                        const size_t s = order[i];
                        const int kept = parts[i].logits == LogitRows::all ? parts[i].count : 1;
                        const float* expected = alone[s]->run(parts[i].tokens, parts[i].count, parts[i].logits);
                        for (int r = 0; r < kept; ++r, ++row)
                            expect_logits(&got[row * V], expected + static_cast<size_t>(r) * V, V, true,
                                          "sequence " + std::to_string(s) + ", step " + std::to_string(step) +
                                              ", row " + std::to_string(r));
                        EXPECT_EQ(batched[s]->position(), alone[s]->position());
                    }
                    EXPECT_EQ(row, kept_rows);
                }
                EXPECT_EQ(spare.scratch_bytes(), reserved) << "a step within the reservation allocated";
                const std::vector<int32_t> zero_tokens(static_cast<size_t>(T), 0);
                const int32_t* zeros = zero_tokens.data();
                const auto refused = [&](InferenceSession& workspace, std::vector<InferenceSession::BatchPart> parts) {
                    EXPECT_THROW(InferenceSession::run_batch(workspace, parts), Error);
                    EXPECT_EQ(batched[0]->position(), alone[0]->position());  // nothing ran
                };
                InferenceSession shorter(model, T - 1, cache);
                refused(*batched[0],
                        {{batched[0].get(), zeros, 1}, {batched[1].get(), zeros, 1}, {batched[0].get(), zeros, 1}});
                refused(*batched[0], {{batched[0].get(), zeros, 1}, {batched[1].get(), zeros, 0}});
                refused(spare, {{batched[0].get(), zeros, 1}, {batched[newcomer].get(), zeros, T}});
                refused(shorter, {{batched[0].get(), zeros, 1}});
            });
        }
    }
}

// The threads of a forward share out heads and weight rows; any number of them gives the same
// logits bit for bit: a prompt, then decoding, for every method, with either cache type. Three
// threads do not divide the GQA models' two kv heads, so there the rows are split evenly.
TEST(Inference, LogitsDoNotDependOnTheThreadCount) {
    const uint64_t seed = test_seed();
    SCOPED_TRACE("DQT_TEST_SEED=" + std::to_string(seed));
    for (const Case& c : every_method()) {
        const ModelConfig config = small_config(c.subln, c.kv_heads);
        const int V = config.vocab_size, T = config.seq_len, prompt = 5;
        ModelParameters parameters(config, c.method);
        initialize_parameters(parameters, seed);
        const std::vector<int32_t> tokens = random_tokens(seed, T, V);
        const InferenceModel model(parameters);
        for (KvCacheType cache : {KvCacheType::f32, KvCacheType::f16, KvCacheType::int8}) {
            SCOPED_TRACE(std::string(c.name) + ", cache " + kv_cache_type_name(cache));
            auto run_all = [&] {
                InferenceSession session(model, T, cache);
                const float* logits = session.run(tokens.data(), prompt, LogitRows::all);
                std::vector<float> all(logits, logits + static_cast<size_t>(prompt) * V);
                for (int t = prompt; t < T; ++t) {
                    logits = session.run(&tokens[t], 1, LogitRows::last);
                    all.insert(all.end(), logits, logits + V);
                }
                return all;
            };
            std::vector<float> one, two, three;
            dqt::testing::with_threads(1, [&] { one = run_all(); });
            dqt::testing::with_threads(2, [&] { two = run_all(); });
            dqt::testing::with_threads(3, [&] { three = run_all(); });
            EXPECT_EQ(one, two);
            EXPECT_EQ(one, three);
        }
    }
}

// A ternary model held in the lookup layout (infer/ternary_layout.h) gives the 2-bit layout's
// logits bit for bit: prompts of 12 and 5 rows, and batches of two decodes, at 1, 2 and 3
// threads (the lookup tiles of 32 rows cut across the threads' row shares); `auto` times each
// batch size asked for once and keeps the lookup layout only where it won at all of them;
// models without ternary linears are left alone.
TEST(Inference, TheLookupLayoutGivesTheTwoBitLayoutsLogitsBitForBit) {
    if (!ternary_lookup_supported()) GTEST_SKIP() << "no AVX-512 VNNI and VL here";
    const uint64_t seed = test_seed();
    SCOPED_TRACE("DQT_TEST_SEED=" + std::to_string(seed));
    for (const Case& c : every_method()) {
        const ModelConfig config = small_config(c.subln, c.kv_heads);
        const int V = config.vocab_size, T = config.seq_len, prompt = 5;
        ModelParameters parameters(config, c.method);
        initialize_parameters(parameters, seed + 3);
        const std::vector<int32_t> tokens = random_tokens(seed + 3, T, V);
        const InferenceModel two_bit(parameters);
        InferenceModel lookup(parameters), fastest(parameters);
        EXPECT_TRUE(hold_ternary_layout(lookup, TernaryLayout::lookup, {1}, KvCacheType::f32).empty()) << c.name;
        const std::vector<TernaryLayoutTiming> timings = hold_ternary_layout(fastest, TernaryLayout::fastest, {4, 1, 4}, KvCacheType::f32);
        const bool ternary = two_bit.layers[0].wq.format == LinearFormat::ternary;
        EXPECT_EQ(lookup.layers[0].wq.format, ternary ? LinearFormat::ternary_lookup : two_bit.layers[0].wq.format)
            << c.name;
        EXPECT_EQ(lookup.head.format, two_bit.head.format == LinearFormat::ternary ? LinearFormat::ternary_lookup
                                                                                   : two_bit.head.format)
            << c.name;
        EXPECT_EQ(!timings.empty(), ternary) << c.name << ": auto measures exactly where there is a choice";
        if (ternary) {
            // Each batch size timed once, smallest first; lookup kept only where it won at every one.
            ASSERT_EQ(timings.size(), 2u) << c.name;
            EXPECT_EQ(timings[0].rows, 1);
            EXPECT_EQ(timings[1].rows, 4);
            bool lookup_won_everywhere = true;
            for (const TernaryLayoutTiming& timing : timings) {
                EXPECT_GT(timing.two_bit_seconds, 0.0) << c.name;
                EXPECT_GT(timing.lookup_seconds, 0.0) << c.name;
                lookup_won_everywhere &= timing.lookup_seconds < kLookupWinMargin * timing.two_bit_seconds;
            }
            EXPECT_EQ(fastest.layers[0].wq.format == LinearFormat::ternary_lookup, lookup_won_everywhere) << c.name;
        }
        if (ternary) {
            EXPECT_LT(lookup.weight_bytes_per_token(), two_bit.weight_bytes_per_token()) << c.name;
        }
        auto run_all = [&](const InferenceModel& model) {
            // The whole sequence at once: more than 8 rows, the lookup layout's unpacked-codes path.
            InferenceSession whole(model, T, KvCacheType::f32);
            const float* logits = whole.run(tokens.data(), T, LogitRows::all);
            std::vector<float> all(logits, logits + static_cast<size_t>(T) * V);
            InferenceSession session(model, T, KvCacheType::f32), other(model, T, KvCacheType::f32);
            logits = session.run(tokens.data(), prompt, LogitRows::all);
            all.insert(all.end(), logits, logits + static_cast<size_t>(prompt) * V);
            other.run(tokens.data() + 1, 2, LogitRows::last);
            for (int t = prompt; t < T; ++t) {
                const InferenceSession::BatchPart both[2] = {{&session, &tokens[t], 1}, {&other, &tokens[t - 1], 1}};
                logits = InferenceSession::run_batch(session, both);
                all.insert(all.end(), logits, logits + 2 * V);
            }
            return all;
        };
        for (int threads : {1, 2, 3}) {
            dqt::testing::with_threads(threads, [&] {
                const std::vector<float> expected = run_all(two_bit);
                EXPECT_EQ(run_all(lookup), expected) << c.name << ", " << threads << " threads";
                EXPECT_EQ(run_all(fastest), expected) << c.name << ", " << threads << " threads, auto";
            });
        }
    }
    EXPECT_THROW(parse_ternary_layout("1.6bit"), Error);
    EXPECT_EQ(parse_ternary_layout("auto"), TernaryLayout::fastest);
}

TEST(Inference, EachMethodsLinearsRunInTheirOwnFormat) {
    const ModelConfig config = small_config(true, 4);
    auto formats = [&](const MethodConfig& method) {
        ModelParameters parameters(config, method);
        initialize_parameters(parameters, 4);
        const InferenceModel model(parameters);
        return std::pair{model.layers[1].w_down.format, model.head.format};
    };
    EXPECT_EQ(formats(method_of(Method::fp, 1)), std::pair(LinearFormat::dense, LinearFormat::dense));
    EXPECT_EQ(formats(method_of(Method::bitnet, 1)), std::pair(LinearFormat::ternary, LinearFormat::dense));
    EXPECT_EQ(formats(method_of(Method::dqt, 1)), std::pair(LinearFormat::ternary, LinearFormat::dense));
    EXPECT_EQ(formats(method_of(Method::dqt, 1, true)), std::pair(LinearFormat::ternary, LinearFormat::ternary));
    EXPECT_EQ(formats(method_of(Method::dqt, 8)), std::pair(LinearFormat::int8, LinearFormat::dense));
    EXPECT_EQ(formats(method_of(Method::dqt, 3, true)), std::pair(LinearFormat::int8, LinearFormat::int8));

    // The packed ternary codes and scale are the stored ones.
    ModelParameters parameters(config, method_of(Method::dqt, 1));
    initialize_parameters(parameters, 4);
    const InferenceModel model(parameters);
    const ParamTensor& wq = *parameters.tensors.layers[0].wq;
    const TernaryMatrix& packed = model.layers[0].wq.ternary;
    EXPECT_EQ(packed.gamma, 1.0f / parameters.scale(wq));
    for (int c = 0; c < wq.cols; ++c)
        EXPECT_EQ(ternary_code_at(packed, 1, c), read_code(parameters.code(wq), parameters.method.grid, wq.cols + c));
    // Built once: later changes to the source do not reach it (a fresh build sees them).
    parameters.scale(wq) *= 2.0f;
    EXPECT_EQ(model.layers[0].wq.ternary.gamma, packed.gamma);
    EXPECT_EQ(InferenceModel(parameters).layers[0].wq.ternary.gamma, 0.5f * packed.gamma);
}

// A model whose fp32 weights are all fp16 exactly (one read from an F16 GGUF) is held in halves,
// 2 bytes a weight. A prompt's logits are those of the same weights held in fp32, bit for bit (a
// vocabulary of 150 rows is 3 of the blocks the halves are widened in, the last one short);
// decoding's, from the fp16 product kernel, agree to float tolerance; both are the same on 1 and
// 2 threads, bit for bit, and a batch of decodes gives each its own decode's logits.
TEST(Inference, WeightsThatAreFp16ExactlyAreHeldInHalvesWithTheSameLogits) {
    const uint64_t seed = test_seed();
    SCOPED_TRACE("DQT_TEST_SEED=" + std::to_string(seed));
    struct HalfCase {
        const char* name;
        MethodConfig method;
        bool tied;
    };
    for (const HalfCase& c : {HalfCase{"fp", method_of(Method::fp, 1), false},
                              HalfCase{"dqt 1.58", method_of(Method::dqt, 1), false},
                              HalfCase{"dqt 1.58 tied", method_of(Method::dqt, 1), true}}) {
        SCOPED_TRACE(c.name);
        ModelConfig config = small_config(true, 2);
        config.vocab_size = 150;
        config.tie_embeddings = c.tied;
        const int V = config.vocab_size, T = config.seq_len, prompt = 5;
        ModelParameters parameters(config, c.method);
        initialize_parameters(parameters, seed);
        for (float& value : parameters.values) value = static_cast<float>(static_cast<Float16>(value));
        const InferenceModel halves(parameters);                      // copies: fp16 where exact
        const InferenceModel fp32(parameters, WeightSource::borrow);  // reads the fp32 values
        EXPECT_EQ(halves.head.format, LinearFormat::half);
        EXPECT_EQ(fp32.head.format, LinearFormat::dense);
        EXPECT_EQ(halves.embedding.halves.size(), static_cast<size_t>(V) * config.dim);
        EXPECT_EQ(halves.layers[1].w_down.format, c.method.kind == Method::fp ? LinearFormat::half : LinearFormat::ternary);
        // Every fp32 linear and the embedding row a token reads shrink to half.
        size_t fp32_linear_bytes = fp32.head.weight_bytes();
        for (const InferenceLayer& layer : fp32.layers)
            for (const InferenceLinear* linear :
                 {&layer.wq, &layer.wk, &layer.wv, &layer.wo, &layer.w_gate, &layer.w_up, &layer.w_down})
                if (linear->format == LinearFormat::dense) fp32_linear_bytes += linear->weight_bytes();
        EXPECT_EQ(fp32.weight_bytes_per_token() - halves.weight_bytes_per_token(),
                  fp32_linear_bytes / 2 + config.dim * sizeof(Float16));
        const std::vector<int32_t> tokens = random_tokens(seed, T, V);
        auto run_all = [&](const InferenceModel& model) {
            InferenceSession session(model, T);
            const float* logits = session.run(tokens.data(), prompt, LogitRows::all);
            std::pair<std::vector<float>, std::vector<float>> prompt_and_decode;
            prompt_and_decode.first.assign(logits, logits + static_cast<size_t>(prompt) * V);
            for (int t = prompt; t < T; ++t) {
                logits = session.run(&tokens[t], 1, LogitRows::last);
                prompt_and_decode.second.insert(prompt_and_decode.second.end(), logits, logits + V);
            }
            return prompt_and_decode;
        };
        std::pair<std::vector<float>, std::vector<float>> one_thread;
        for (int threads : {1, 2}) {
            SCOPED_TRACE(std::to_string(threads) + " threads");
            std::pair<std::vector<float>, std::vector<float>> from_halves, from_fp32;
            dqt::testing::with_threads(threads, [&] {
                    from_halves = run_all(halves);
                    from_fp32 = run_all(fp32);
            });
            EXPECT_EQ(from_halves.first, from_fp32.first);
            expect_logits(from_halves.second.data(), from_fp32.second.data(), from_fp32.second.size(), false, "decode");
            if (threads == 1) one_thread = from_halves;
            EXPECT_EQ(from_halves, one_thread);
        }
        // A batch of three decodes and a new prompt's chunk of three tokens gives each the
        // logits of its own run, bit for bit.
        std::vector<std::unique_ptr<InferenceSession>> batched, alone;
        std::vector<InferenceSession::BatchPart> parts;
        for (int s = 0; s < 4; ++s) {
            batched.push_back(std::make_unique<InferenceSession>(halves, T));
            alone.push_back(std::make_unique<InferenceSession>(halves, T));
            if (s == 3) {
                parts.push_back({batched.back().get(), tokens.data(), 3});
                continue;
            }
            batched.back()->run(tokens.data() + s, prompt, LogitRows::last);
            alone.back()->run(tokens.data() + s, prompt, LogitRows::last);
            parts.push_back({batched.back().get(), &tokens[static_cast<size_t>(prompt + s)], 1});
        }
        const float* batch_logits = InferenceSession::run_batch(*batched[0], parts);
        const std::vector<float> got(batch_logits, batch_logits + parts.size() * V);
        for (size_t s = 0; s < parts.size(); ++s)
            expect_logits(&got[s * V], alone[s]->run(parts[s].tokens, parts[s].count, LogitRows::last), V, true,
                          "batched sequence " + std::to_string(s));
        // One value off the fp16 grid keeps the tensor in fp32.
        parameters.value(*parameters.tensors.output)[7] += 1e-6f;
        EXPECT_EQ(InferenceModel(parameters).head.format, LinearFormat::dense);
    }
}

TEST(Inference, RefusesTokensOutsideTheVocabularyAndSequencesBeyondTheContext) {
    const ModelConfig config = small_config(true, 4);
    ModelParameters parameters(config, method_of(Method::dqt, 1));
    initialize_parameters(parameters, 1);
    const InferenceModel model(parameters);
    InferenceSession session(model, 4);
    const int32_t outside[] = {config.vocab_size}, negative[] = {-1};
    EXPECT_THROW(session.run(outside, 1, LogitRows::last), Error);
    EXPECT_THROW(session.run(negative, 1, LogitRows::last), Error);
    const std::vector<int32_t> five(5, 1);
    EXPECT_THROW(session.run(five.data(), 5, LogitRows::last), Error);
    EXPECT_EQ(session.position(), 0);  // nothing changed
    EXPECT_THROW(InferenceSession(model, config.seq_len + 1), Error);
    EXPECT_THROW(parse_kv_cache_type("q8"), Error);
    for (const KvCacheType type : {KvCacheType::f32, KvCacheType::f16, KvCacheType::int8})
        EXPECT_EQ(parse_kv_cache_type(kv_cache_type_name(type)), type);
}

// A cache larger than the machine is refused with its size before anything is allocated.
TEST(Inference, AKvCacheLargerThanTheMachineIsRefusedBeforeAllocating) {
    ModelConfig config = small_config(true, 4);
    config.n_layers = 100000;  // 100,000 layers x 2^20 positions x 32 values: terabytes
    const int64_t before = memory_live_bytes(MemCategory::activations);
    try {
        KvCache cache(config, kMaxSeqLen, KvCacheType::f16);
        ADD_FAILURE() << "allocated a cache of " << cache.bytes() << " bytes";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("GiB, more than this machine's"), std::string::npos) << e.what();
    }
    EXPECT_EQ(memory_live_bytes(MemCategory::activations), before);
}

// bench serve's figures count what a decode step reads from the cache per position attended;
// a cache whose strides need no padding (positions a multiple of a key tile, head_dim of
// whole vectors) holds exactly that many bytes a position.
TEST(Inference, ACacheHoldsItsPositionsKeysAndValuesAndNoMore) {
    ModelConfig config = small_config(true, 2);
    config.dim = 64;  // head_dim 16
    const int positions = 2 * kAttentionKeyTile;
    for (const KvCacheType type : {KvCacheType::f32, KvCacheType::f16, KvCacheType::int8}) {
        const KvCache cache(config, positions, type);
        EXPECT_EQ(static_cast<double>(cache.bytes()), positions * kv_bytes_per_position(config, type));
        EXPECT_EQ(kv_cache_bytes(config, positions, type), positions * kv_bytes_per_position(config, type));
    }
    EXPECT_EQ(kv_bytes_per_position(config, KvCacheType::f32), 2 * kv_bytes_per_position(config, KvCacheType::f16));
    // int8: a byte an entry, and a 4-byte scale per kv head for each key and each value.
    EXPECT_EQ(kv_bytes_per_position(config, KvCacheType::int8),
              kv_bytes_per_position(config, KvCacheType::f32) / 4 + 2.0 * config.n_layers * config.n_kv_heads * 4);
}

// Generation sizes its cache to the prompt and the tokens asked for, not to the context the
// model claims (a file's seq_len of 2^20 sized a 512 MiB cache for a few tokens).
TEST(Inference, GenerationCachesOnlyWhatItCanReach) {
    const Dataset data = open_dataset(dqt::testing::tiny_dataset_dir());
    ModelConfig config = small_config(true, 4);
    config.vocab_size = data.tokenizer->vocab_size();
    config.seq_len = kMaxSeqLen;
    ModelParameters parameters(config, method_of(Method::dqt, 1));
    initialize_parameters(parameters, 4);
    const InferenceModel model(parameters);
    memory_reset_peaks();
    const int64_t before = memory_live_bytes(MemCategory::activations);
    const GenerationResult result = generate_text(model, *data.tokenizer, SpecialTokens{}, "Our", 5, SamplingOptions{},
                                                  KvCacheType::f32);
    EXPECT_EQ(result.generated_tokens, 5);
    EXPECT_LT(memory_peak_bytes(MemCategory::activations) - before, int64_t{1} << 20);
}

// Evaluation holds one window's KV cache and scratch, whatever the number of tokens scored.
TEST(Inference, EvaluationMemoryDoesNotGrowWithTheTokensScored) {
    const Dataset data = open_dataset(dqt::testing::tiny_dataset_dir());
    ModelConfig config = small_config(true, 4);
    config.vocab_size = data.tokenizer->vocab_size();
    config.seq_len = 32;
    ModelParameters parameters(config, method_of(Method::dqt, 1));
    initialize_parameters(parameters, 3);
    const InferenceModel model(parameters);
    auto peak_of = [&](int64_t tokens) {
        memory_reset_peaks();
        const int64_t before = memory_live_bytes(MemCategory::scratch) + memory_live_bytes(MemCategory::activations);
        const EvalResult result = evaluate(model, data.val, config.seq_len, tokens);
        EXPECT_GT(result.tokens, 0);
        return memory_peak_bytes(MemCategory::scratch) + memory_peak_bytes(MemCategory::activations) - before;
    };
    peak_of(config.seq_len);  // allocates what the kernels keep per thread across calls (AVX2 prompt tiles)
    const int64_t small = peak_of(2 * config.seq_len), large = peak_of(16 * config.seq_len);
    EXPECT_GT(small, 0);
    EXPECT_EQ(small, large);
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

// Log-probabilities against a long-double log-sum-exp of fresh random logits: the sampled
// token's and the top ones', which are the largest logits in order, ties to the lower id.
TEST(Logprobs, AreTheLogSoftmaxAndTheTopAreTheLargestInOrder) {
    const int vocab = 1000;
    std::vector<float> logits(vocab);
    for (int i = 0; i < vocab; ++i) logits[i] = 8.0f * (uniform01(31, 0, 0, static_cast<uint32_t>(i)) - 0.5f);
    logits[17] = logits[600] = 9.0f;  // a tie at the top: 17 comes first
    long double sum = 0;
    for (float x : logits) sum += std::exp(static_cast<long double>(x));
    const auto reference = [&](int token) { return static_cast<double>(logits[token] - std::log(sum)); };

    const SampledLogprobs lp = sampled_logprobs(logits.data(), vocab, 123, 5);
    EXPECT_EQ(lp.sampled.token, 123);
    EXPECT_NEAR(lp.sampled.logprob, reference(123), 1e-6);
    std::vector<int> order(vocab);
    for (int i = 0; i < vocab; ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return logits[a] > logits[b]; });
    ASSERT_EQ(lp.top.size(), 5u);
    for (size_t i = 0; i < lp.top.size(); ++i) {
        EXPECT_EQ(lp.top[i].token, order[i]);
        EXPECT_NEAR(lp.top[i].logprob, reference(order[i]), 1e-6);
    }
    EXPECT_EQ(lp.top[0].token, 17);
    EXPECT_EQ(lp.top[1].token, 600);
    EXPECT_TRUE(sampled_logprobs(logits.data(), vocab, 0, 0).top.empty());
    EXPECT_EQ(sampled_logprobs(logits.data(), 3, 0, 10).top.size(), 3u);
    EXPECT_THROW(sampled_logprobs(logits.data(), vocab, vocab, 1), Error);
}
