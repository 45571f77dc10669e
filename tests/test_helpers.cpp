#include "test_helpers.h"

#include <omp.h>
#include <unistd.h>

#include <sys/wait.h>

#include <algorithm>
#include <cstring>
#include <bit>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "data/dataset.h"
#include "infer/session.h"
#include "io/checkpoint.h"
#include "io/safetensors.h"
#include "model/llama.h"

namespace dqt::testing {

TempDir::TempDir(const std::string& name) {
    path = std::filesystem::temp_directory_path() /
           ("dqt-test-" + name + "-" + std::to_string(::getpid()) + "-" + std::to_string(std::rand()));
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
}

TempDir::~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path, ignored);
}

void write_tiny_corpus(const std::string& folder, int documents) {
    std::filesystem::create_directories(folder);
    const char* subjects[] = {"The nation", "Our people", "The Congress", "This union", "Every citizen"};
    const char* verbs[] = {"shall build", "must defend", "will honor", "can improve", "should protect"};
    const char* objects[] = {"the common good.", "our liberty.", "the public trust.", "its future.", "the law."};
    for (int d = 0; d < documents; ++d) {
        char name[32];
        std::snprintf(name, sizeof name, "doc_%03d.txt", d);
        std::ofstream file(std::filesystem::path(folder) / name);
        for (int s = 0; s < 400; ++s) {
            const int k = d * 7 + s * 3;
            file << subjects[k % 5] << ' ' << verbs[(k / 5) % 5] << ' ' << objects[(k / 25) % 5] << ' ';
        }
        file << '\n';
    }
}

const std::string& tiny_dataset_dir() {
    static TempDir root("dataset");
    static const std::string dir = [] {
        write_tiny_corpus(root / "corpus", 20);
        prepare_dataset(root / "corpus", root / "data", "byte", 0);
        return root / "data";
    }();
    return dir;
}

CommandResult run_command(const std::string& command_line) {
    const std::string command = command_line + " 2>&1";
    FILE* pipe = popen(command.c_str(), "r");
    CommandResult result;
    if (!pipe) return result;
    std::array<char, 4096> chunk;
    size_t got;
    while ((got = std::fread(chunk.data(), 1, chunk.size(), pipe)) > 0) result.output.append(chunk.data(), got);
    const int status = pclose(pipe);
    result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    return result;
}

ModelConfig small_llama_config(int vocab_size) {
    ModelConfig c;
    c.dim = 64;
    c.n_layers = 1;
    c.n_heads = 2;
    c.n_kv_heads = 2;
    c.ffn_dim = 64;
    c.seq_len = 64;
    c.subln = false;
    c.vocab_size = vocab_size;
    return c;
}

TrainOptions tiny_train_options(const std::string& out_dir) {
    TrainOptions o;
    o.data_dir = tiny_dataset_dir();
    o.out_dir = out_dir;
    o.model.dim = 32;
    o.model.n_layers = 2;
    o.model.n_heads = 2;
    o.model.n_kv_heads = 2;
    o.model.ffn_dim = 64;
    o.model.seq_len = 32;
    o.model.vocab_size = 256;
    // Untied, as the tests' loss bounds were measured (a tied 32-wide table learns more slowly in 40
    // steps); tied runs have cases of their own (test_train.cpp).
    o.model.tie_embeddings = false;
    o.steps = 40;
    o.batch = 4;
    o.lr = 1e-2f;
    o.warmup_steps = 5;
    o.eval_every = 20;
    o.eval_tokens = 2048;
    o.log_every = 5;
    o.checkpoint_every = 0;
    return o;
}

std::string read_bytes(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

uint64_t test_seed() {
    const char* text = std::getenv("DQT_TEST_SEED");
    return text != nullptr ? std::strtoull(text, nullptr, 10) : 20261123;
}

std::string seed_trace(uint64_t seed) { return "DQT_TEST_SEED=" + std::to_string(seed); }

void with_threads(int threads, const std::function<void()>& fn) {
    const int saved = omp_get_max_threads();
    omp_set_num_threads(threads);
    fn();
    omp_set_num_threads(saved);
}

void copy_checkpoint_with_meta(const std::string& from, const std::string& to,
                               const std::function<void(nlohmann::json&)>& edit) {
    const CheckpointReader reader(from);
    const std::vector<std::string> names = reader.names();
    std::vector<std::vector<char>> payloads;
    std::vector<TensorView> views;
    for (const std::string& name : names) {
        const std::string dtype = reader.dtype(name);
        const std::vector<int64_t> shape = reader.shape(name);
        size_t bytes = dtype == "f32" ? 4 : dtype == "bf16" ? 2 : 1;
        for (int64_t n : shape) bytes *= static_cast<size_t>(n);
        payloads.emplace_back(bytes);
        reader.read(name, dtype, shape, payloads.back().data(), bytes);
    }
    for (size_t k = 0; k < names.size(); ++k) {
        views.push_back({names[k], reader.dtype(names[k]), reader.shape(names[k]), payloads[k].data(), payloads[k].size()});
    }
    nlohmann::json meta = reader.meta();
    edit(meta);
    save_checkpoint(to, meta, views);
}

double reference_logit_error(const ModelParameters& model, const std::string& expected_path) {
    const SafetensorsReader expected(expected_path);
    const std::vector<int32_t> tokens = expected.read_i32("tokens");
    const std::vector<float> logits = expected.read_f32("logits");
    const std::vector<int64_t> shape = expected.shape("logits");  // (batch, T, V)
    Activations acts(model.config, static_cast<int>(shape[0]), static_cast<int>(shape[1]));
    require(tokens.size() == acts.tokens.size(), expected_path + ": tokens do not match the logits' shape");
    std::copy(tokens.begin(), tokens.end(), acts.tokens.data());
    model_forward(model, acts, false);
    double largest = 0.0, worst = 0.0;
    for (size_t i = 0; i < logits.size(); ++i) {
        largest = std::max(largest, std::fabs(static_cast<double>(logits[i])));
        worst = std::max(worst, std::fabs(static_cast<double>(acts.logits[i]) - logits[i]));
    }
    return worst / largest;
}

namespace {

void expect_same_linear(const InferenceLinear& a, const InferenceLinear& b, const std::string& what) {
    SCOPED_TRACE(what);
    ASSERT_EQ(a.format, b.format);
    ASSERT_EQ(a.rows, b.rows);
    ASSERT_EQ(a.cols, b.cols);
    const size_t count = static_cast<size_t>(a.rows) * a.cols;
    switch (a.format) {
        case LinearFormat::dense: EXPECT_EQ(0, std::memcmp(a.dense, b.dense, count * sizeof(float))); break;
        case LinearFormat::half: EXPECT_EQ(0, std::memcmp(a.halves, b.halves, count * sizeof(Float16))); break;
        case LinearFormat::ternary:
            EXPECT_EQ(std::bit_cast<uint32_t>(a.ternary.gamma), std::bit_cast<uint32_t>(b.ternary.gamma));
            ASSERT_EQ(a.ternary.packed.bytes(), b.ternary.packed.bytes());
            EXPECT_EQ(0, std::memcmp(a.ternary.packed.data(), b.ternary.packed.data(), a.ternary.packed.bytes()));
            break;
        case LinearFormat::ternary_lookup:
            EXPECT_EQ(std::bit_cast<uint32_t>(a.lookup.gamma), std::bit_cast<uint32_t>(b.lookup.gamma));
            ASSERT_EQ(a.lookup.packed.bytes(), b.lookup.packed.bytes());
            EXPECT_EQ(0, std::memcmp(a.lookup.packed.data(), b.lookup.packed.data(), a.lookup.packed.bytes()));
            break;
        case LinearFormat::int8:
            EXPECT_EQ(std::bit_cast<uint32_t>(a.int8.scale), std::bit_cast<uint32_t>(b.int8.scale));
            ASSERT_EQ(a.int8.values.bytes(), b.int8.values.bytes());
            EXPECT_EQ(0, std::memcmp(a.int8.values.data(), b.int8.values.data(), a.int8.values.bytes()));
            EXPECT_EQ(a.int8.row_sums, b.int8.row_sums);
            break;
    }
}

void expect_same_norm(const float* a, const float* b, int count, const std::string& what) {
    ASSERT_EQ(a == nullptr, b == nullptr) << what;
    if (a != nullptr) {
        EXPECT_EQ(0, std::memcmp(a, b, static_cast<size_t>(count) * sizeof(float))) << what;
    }
}

}  // namespace

void expect_same_inference_model(const InferenceModel& a, const InferenceModel& b) {
    const ModelConfig& c = a.config;
    ASSERT_EQ(nlohmann::json(a.config).dump(), nlohmann::json(b.config).dump());
    EXPECT_EQ(a.method_label, b.method_label);
    const InferenceEmbedding &ea = a.embedding, &eb = b.embedding;
    const size_t table = static_cast<size_t>(ea.rows) * ea.cols;
    ASSERT_EQ(ea.dense == nullptr, eb.dense == nullptr);
    if (ea.dense != nullptr) {
        EXPECT_EQ(0, std::memcmp(ea.dense, eb.dense, table * sizeof(float)));
    }
    // An empty Array's data() is null, which memcmp may not be given even for 0 bytes.
    ASSERT_EQ(ea.halves.bytes(), eb.halves.bytes());
    if (ea.halves.bytes() > 0) {
        EXPECT_EQ(0, std::memcmp(ea.halves.data(), eb.halves.data(), ea.halves.bytes()));
    }
    ASSERT_EQ(ea.codes.bytes(), eb.codes.bytes());
    if (ea.codes.bytes() > 0) {
        EXPECT_EQ(0, std::memcmp(ea.codes.data(), eb.codes.data(), ea.codes.bytes()));
    }
    EXPECT_EQ(std::bit_cast<uint32_t>(ea.code_scale), std::bit_cast<uint32_t>(eb.code_scale));
    for (int l = 0; l < c.n_layers; ++l) {
        const InferenceLayer &la = a.layers[static_cast<size_t>(l)], &lb = b.layers[static_cast<size_t>(l)];
        const std::string layer = "layer " + std::to_string(l);
        expect_same_norm(la.attn_norm, lb.attn_norm, c.dim, layer + " attn_norm");
        expect_same_norm(la.attn_subnorm, lb.attn_subnorm, c.dim, layer + " attn_subnorm");
        expect_same_norm(la.ffn_norm, lb.ffn_norm, c.dim, layer + " ffn_norm");
        expect_same_norm(la.ffn_subnorm, lb.ffn_subnorm, c.ffn_dim, layer + " ffn_subnorm");
        expect_same_linear(la.wq, lb.wq, layer + " wq");
        expect_same_linear(la.wk, lb.wk, layer + " wk");
        expect_same_linear(la.wv, lb.wv, layer + " wv");
        expect_same_linear(la.wo, lb.wo, layer + " wo");
        expect_same_linear(la.w_gate, lb.w_gate, layer + " w_gate");
        expect_same_linear(la.w_up, lb.w_up, layer + " w_up");
        expect_same_linear(la.w_down, lb.w_down, layer + " w_down");
    }
    expect_same_norm(a.output_norm, b.output_norm, c.dim, "output_norm");
    expect_same_linear(a.head, b.head, "head");

    const int n = std::min(c.seq_len, 5);
    std::vector<int32_t> tokens(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) tokens[static_cast<size_t>(i)] = (i * 37 + 3) % c.vocab_size;
    InferenceSession sa(a, n), sb(b, n);
    const float* logits_a = sa.run(tokens.data(), n, LogitRows::all);
    const float* logits_b = sb.run(tokens.data(), n, LogitRows::all);
    EXPECT_EQ(0, std::memcmp(logits_a, logits_b, static_cast<size_t>(n) * c.vocab_size * sizeof(float)));
}

LoadPeak inference_load_peak(const std::function<void()>& load) {
    const int64_t before = memory_live_bytes(MemCategory::weights);
    memory_reset_peaks();
    load();
    const int64_t after = memory_live_bytes(MemCategory::weights);
    return {after - before, memory_peak_bytes(MemCategory::weights) - after};
}

std::vector<int8_t> random_int8(std::mt19937& rng, size_t count, int low, int high) {
    std::uniform_int_distribution<int> pick(low, high);
    std::vector<int8_t> values(count);
    for (auto& v : values) v = static_cast<int8_t>(pick(rng));
    return values;
}

}  // namespace dqt::testing
