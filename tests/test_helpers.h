#pragma once
// Shared fixtures: a small generated corpus and a tiny training configuration.
#include <cstdint>
#include <filesystem>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "infer/inference_model.h"
#include "model/parameters.h"
#include "train/options.h"

namespace dqt::testing {

// A fresh empty folder under the system temp dir, removed by the caller's TempDir.
struct TempDir {
    std::filesystem::path path;
    explicit TempDir(const std::string& name);
    ~TempDir();
    std::string operator/(const std::string& child) const { return (path / child).string(); }
};

// A shell command's exit code and output.
struct CommandResult {
    int exit_code = -1;
    std::string output;  // stdout and stderr together
};
CommandResult run_command(const std::string& command_line);

// count values drawn uniformly from [low, high] (int8 codes, activations).
std::vector<int8_t> random_int8(std::mt19937& rng, size_t count, int low, int high);

// Writes `documents` small .txt files of simple, learnable English-like text into folder.
void write_tiny_corpus(const std::string& folder, int documents);

// A byte-level dataset prepared from a tiny corpus, cached per process.
const std::string& tiny_dataset_dir();

// Options of a run that trains in about a second.
TrainOptions tiny_train_options(const std::string& out_dir);

// A 64-wide one-block LLaMA without SubLN (llama.cpp's `llama` graph) over `vocab_size` tokens:
// for tests of what goes around a model (tokenizers, file keys), not of its arithmetic.
ModelConfig small_llama_config(int vocab_size);

// The seed of a randomised test: DQT_TEST_SEED when set, else a fixed default, so that every
// run replays; a test puts seed_trace(seed) in its SCOPED_TRACE so a failure names it.
uint64_t test_seed();
std::string seed_trace(uint64_t seed);

// Two inference models hold the same weights in the same formats, byte for byte (embedding,
// every linear, norms, head), and give the same logits bit for bit on a few tokens.
void expect_same_inference_model(const InferenceModel& a, const InferenceModel& b);

// What `load` (which builds an inference model and keeps it) adds to the accounted weights at
// its peak, beyond the model it leaves.
struct LoadPeak {
    int64_t model_bytes = 0;  // accounted weights the loaded model holds
    int64_t extra_bytes = 0;  // the load's peak minus that
};
LoadPeak inference_load_peak(const std::function<void()>& load);

// The whole file at path as bytes ("" when it cannot be read).
std::string read_bytes(const std::string& path);

// Writes a copy of the checkpoint at `from` to `to` with its metadata changed by `edit`: the
// tensors byte for byte, the checksums made anew (a crafted file that passes them).
void copy_checkpoint_with_meta(const std::string& from, const std::string& to,
                               const std::function<void(nlohmann::json&)>& edit);

// dqt's forward on a reference file's batch (expected_path: safetensors with I32 "tokens" and
// "logits" of shape (batch, T, V), as the reference scripts write them): the largest
// |dqt - reference| relative to the largest |logit|.
double reference_logit_error(const ModelParameters& model, const std::string& expected_path);

// Runs fn with the given OpenMP thread count, restoring the previous count afterwards.
void with_threads(int threads, const std::function<void()>& fn);

}  // namespace dqt::testing
