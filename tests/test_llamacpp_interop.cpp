// The real engine: a small trained ternary model exported to GGUF runs in llama.cpp (the
// prebuilt CPU libraries of npm node-llama-cpp@3.22.1, installed by scripts/setup.sh into
// tools/llamacpp/) and gives dqt's next-token distributions and greedy continuations; both
// vocabularies tokenize the same way there as in dqt.
//
// Why not bit-identical: llama.cpp quantizes the activations entering a TQ weight per block of
// 256 values (Q8_K) and a Q8_0 weight per 32 values, where dqt quantizes per token (the same
// for a 256-wide input into TQ, finer otherwise), sums attention in another order, and
// accumulates RMSNorm in double. Measured on these tests' models: the largest probability
// difference stays below 1e-3; the bound below leaves room for other CPUs' kernels.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "data/dataset.h"
#include "data/tokenizer.h"
#include "export/gguf_model.h"
#include "infer/sampling.h"
#include "infer/session.h"
#include "test_helpers.h"
#include "train/model_checkpoint.h"
#include "train/trainer.h"

using namespace dqt;
using dqt::testing::TempDir;

namespace {

constexpr double kMaxProbabilityDifference = 1e-2;
constexpr int kGreedyTokens = 16;

std::string interop_script() { return std::string(DQT_SOURCE_DIR) + "/tools/llamacpp/interop.mjs"; }

bool llamacpp_installed() {
    return std::filesystem::exists(std::string(DQT_SOURCE_DIR) + "/tools/llamacpp/node_modules/node-llama-cpp");
}

// Runs the request through llama.cpp; the parsed response (stdout; its log goes to stderr).
nlohmann::json run_llamacpp(const nlohmann::json& request, const std::string& folder) {
    const std::string request_path = folder + "/request.json";
    std::ofstream(request_path) << request.dump();
    FILE* pipe = popen(("node " + interop_script() + " " + request_path).c_str(), "r");
    std::string output;
    char chunk[4096];
    size_t got;
    while (pipe && (got = std::fread(chunk, 1, sizeof chunk, pipe)) > 0) output.append(chunk, got);
    const int status = pipe ? pclose(pipe) : -1;
    EXPECT_EQ(status, 0) << output;
    const nlohmann::json response = nlohmann::json::parse(output, nullptr, false);
    EXPECT_FALSE(response.is_discarded()) << "llama.cpp's answer is not JSON: " << output;
    return response.is_discarded() ? nlohmann::json::object() : response;
}

std::vector<double> softmax(const float* logits, int count) {
    double top = logits[0];
    for (int i = 1; i < count; ++i) top = std::max(top, static_cast<double>(logits[i]));
    std::vector<double> p(count);
    double sum = 0.0;
    for (int i = 0; i < count; ++i) sum += p[i] = std::exp(logits[i] - top);
    for (double& v : p) v /= sum;
    return p;
}

struct DqtRun {
    std::vector<double> probabilities;  // after the prompt
    std::vector<int32_t> greedy;
};

DqtRun run_dqt(const ModelParameters& parameters, const std::vector<int32_t>& prompt) {
    const InferenceModel model(parameters);
    InferenceSession session(model, static_cast<int>(prompt.size()) + kGreedyTokens);
    const float* logits = nullptr;
    for (int32_t token : prompt) logits = session.run(&token, 1, LogitRows::last);  // token by token: the decode path
    DqtRun run;
    run.probabilities = softmax(logits, model.config.vocab_size);
    for (int i = 0; i < kGreedyTokens; ++i) {
        const int32_t next = sample_token(logits, model.config.vocab_size, SamplingOptions{0.0f}, 0.0f);
        run.greedy.push_back(next);
        if (i + 1 < kGreedyTokens) logits = session.run(&next, 1, LogitRows::last);
    }
    return run;
}

const std::vector<std::string> kTexts = {
    "The nation shall build the common good. ",
    "Every citizen must defend our liberty,\nand the Congress will honor its future: 1789-2024!",
    "  double  spaces, tabs\tand \"quotes\" (parentheses) [brackets] {braces} ... 'apostrophes' ",
    "Unicode: caf\xc3\xa9, na\xc3\xafve, \xe2\x82\xac 5, \xf0\x9f\x87\xba\xf0\x9f\x87\xb8",
};

}  // namespace

namespace {

// A small model trained for a few seconds with the given method, in the shapes llama.cpp's
// block formats need (rows of 256) and with tied embeddings (the bitnet graph's head).
LoadedModel train_small(const std::string& out_dir, Method method, int bits) {
    TrainOptions options = dqt::testing::tiny_train_options(out_dir);
    options.model.dim = 256;
    options.model.n_heads = 4;
    options.model.n_kv_heads = 2;
    options.model.ffn_dim = 512;
    options.model.seq_len = 64;
    options.model.tie_embeddings = true;
    options.method.method = method;
    options.method.grid = CodeGrid{bits};
    options.steps = 30;
    options.eval_every = 0;
    run_training(options, RunControl{false, 0, false, true});
    return load_model_checkpoint(checkpoint_path_in(options.out_dir));
}

// Exports, runs the file in dqt (on the ternary kernels where it has ternary weights) and in
// llama.cpp, and compares next-token distributions, greedy continuations and tokenizations.
void expect_same_in_llamacpp(const LoadedModel& trained, const GgufExportOptions& export_options,
                             const std::string& folder) {
    const std::vector<std::vector<int32_t>> prompts = {
        trained.tokenizer->encode("The nation shall "), trained.tokenizer->encode("Every citizen must defend "),
        trained.tokenizer->encode("Our people will"), trained.tokenizer->encode("This union can improve the")};
    const std::string gguf = folder + "/model.gguf";
    export_gguf(*trained.model, *trained.tokenizer, export_options, gguf);
    LoadedModel imported = load_model_checkpoint(gguf);

    const nlohmann::json response = run_llamacpp(
        {{"model", gguf}, {"threads", 1}, {"context", 128}, {"prompts", prompts}, {"greedy_tokens", kGreedyTokens},
         {"texts", kTexts}},
        folder);
    ASSERT_EQ(response.at("vocab").get<int>(), 256);
    for (size_t p = 0; p < prompts.size(); ++p) {
        const DqtRun ours = run_dqt(*imported.model, prompts[p]);
        std::vector<float> their_logits;
        for (const auto& v : response["prompts"][p]["logits"]) their_logits.push_back(v.get<float>());
        const std::vector<double> theirs = softmax(their_logits.data(), static_cast<int>(their_logits.size()));
        double worst = 0.0;
        for (size_t i = 0; i < theirs.size(); ++i) worst = std::max(worst, std::fabs(theirs[i] - ours.probabilities[i]));
        EXPECT_LT(worst, kMaxProbabilityDifference) << "prompt " << p;
        EXPECT_EQ(response["prompts"][p]["greedy"].get<std::vector<int32_t>>(), ours.greedy) << "prompt " << p;
        std::printf("[ interop ] %s, prompt %zu: largest probability difference %.2e\n",
                    trained.model->method.label().c_str(), p, worst);
    }
    for (size_t t = 0; t < kTexts.size(); ++t)
        EXPECT_EQ(response["tokenized"][t].get<std::vector<int32_t>>(), trained.tokenizer->encode(kTexts[t]))
            << "text " << t;
}

}  // namespace

TEST(LlamaCppInterop, TrainedTernaryModelRunsTheSameInLlamaCpp) {
    ASSERT_TRUE(llamacpp_installed()) << "llama.cpp is not installed: run scripts/setup.sh (npm install in tools/llamacpp)";
    TempDir dir("interop");
    const LoadedModel trained = train_small(dir / "run", Method::dqt, 1);
    for (GgufTernaryFormat format : {GgufTernaryFormat::tq2_0, GgufTernaryFormat::tq1_0}) {
        SCOPED_TRACE(format == GgufTernaryFormat::tq2_0 ? "TQ2_0" : "TQ1_0");
        GgufExportOptions options;
        options.ternary = format;
        expect_same_in_llamacpp(trained, options, dir.path.string());
    }
}

// An 8-bit dqt model goes out as Q8_0 codes with a .scale tensor, an fp one as F32.
TEST(LlamaCppInterop, EightBitAndFpModelsRunTheSameInLlamaCpp) {
    ASSERT_TRUE(llamacpp_installed()) << "llama.cpp is not installed: run scripts/setup.sh (npm install in tools/llamacpp)";
    TempDir dir("interop-8");
    expect_same_in_llamacpp(train_small(dir / "d8", Method::dqt, 8), GgufExportOptions{}, dir.path.string());
    expect_same_in_llamacpp(train_small(dir / "fp", Method::fp, 1), GgufExportOptions{}, dir.path.string());
}

TEST(LlamaCppInterop, SentencepieceVocabularyTokenizesTheSame) {
    ASSERT_TRUE(llamacpp_installed()) << "llama.cpp is not installed: run scripts/setup.sh (npm install in tools/llamacpp)";
    TempDir dir("interop-bpe");
    dqt::testing::write_tiny_corpus(dir / "corpus", 8);
    std::vector<std::string> texts;
    for (const auto& entry : std::filesystem::directory_iterator(dir / "corpus")) {
        std::ifstream file(entry.path());
        texts.emplace_back(std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>());
    }
    texts.push_back("Unicode: caf\xc3\xa9, 1789-2024, \"quotes\"\nnew lines and  double  spaces.");
    const auto tokenizer = train_bpe_tokenizer(texts, 400, 1);
    ModelConfig config;
    config.dim = 256;
    config.n_layers = 1;
    config.n_heads = 4;
    config.ffn_dim = 256;
    config.seq_len = 64;
    config.vocab_size = tokenizer->vocab_size();
    config.tie_embeddings = true;
    MethodConfig method;
    method.method = Method::dqt;
    ModelParameters model(config, method);
    model.initialize(3);
    const std::string gguf = dir / "bpe.gguf";
    export_gguf(model, *tokenizer, GgufExportOptions{}, gguf);

    const nlohmann::json response =
        run_llamacpp({{"model", gguf}, {"threads", 1}, {"context", 64}, {"texts", kTexts}}, dir.path.string());
    for (size_t t = 0; t < kTexts.size(); ++t)
        EXPECT_EQ(response["tokenized"][t].get<std::vector<int32_t>>(), tokenizer->encode(kTexts[t])) << "text " << t;
    // And dqt reads its own export back with the same tokenizer.
    const LoadedModel imported = load_model_checkpoint(gguf);
    EXPECT_EQ(imported.tokenizer->serialize(), tokenizer->serialize());
}
