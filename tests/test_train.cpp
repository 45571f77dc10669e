// End-to-end training: loss falls, resume is exact, threads do not change results.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <fstream>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "data/shard.h"
#include "io/checkpoint.h"
#include "test_helpers.h"
#include "train/trainer.h"

using namespace dqt;
using namespace dqt::testing;

namespace {

RunControl quiet_control() {
    RunControl control;
    control.quiet = true;
    return control;
}

// Losses of the "train" lines of a metrics log, by step.
std::vector<std::pair<int, double>> train_losses(const std::string& out_dir) {
    std::ifstream log(metrics_path_in(out_dir));
    std::vector<std::pair<int, double>> losses;
    std::string line;
    while (std::getline(log, line)) {
        const auto record = nlohmann::json::parse(line);
        if (record["type"] == "train") losses.emplace_back(record["step"].get<int>(), record["loss"].get<double>());
    }
    return losses;
}

double unigram_entropy_nats(const Shard& shard) {
    std::vector<double> counts(shard.vocab_size(), 0.0);
    std::vector<int32_t> tokens(shard.token_count());
    shard.read(0, tokens.size(), tokens.data());
    for (int32_t token : tokens) counts[token] += 1.0;
    double entropy = 0.0;
    for (double count : counts) {
        if (count > 0) entropy -= count / tokens.size() * std::log(count / tokens.size());
    }
    return entropy;
}

// Every parameter and optimizer tensor of two checkpoints, byte for byte.
void expect_same_tensors(const std::string& a_path, const std::string& b_path) {
    const CheckpointReader a(a_path), b(b_path);
    ASSERT_EQ(a.names(), b.names());
    for (const std::string& name : a.names()) {
        const auto shape = a.shape(name);
        size_t count = 1;
        for (int64_t extent : shape) count *= static_cast<size_t>(extent);
        const size_t bytes = a.dtype(name) == "f32" ? count * 4 : count;
        std::vector<char> x(bytes), y(bytes);
        a.read(name, a.dtype(name), shape, x.data(), bytes);
        b.read(name, b.dtype(name), shape, y.data(), bytes);
        EXPECT_EQ(x, y) << "tensor " << name << " differs";
    }
}

}  // namespace

TEST(Train, TinyRunLossFalls) {
    TempDir run("loss-falls");
    TrainOptions options = tiny_train_options(run / "run");
    options.steps = 120;
    const TrainReport report = run_training(options, quiet_control());
    const auto losses = train_losses(options.out_dir);
    ASSERT_GE(losses.size(), 2u);
    // Byte-level start is ln(256) = 5.55 nats; a model that learned anything beyond byte
    // frequencies ends below the unigram entropy of the data.
    EXPECT_GT(losses.front().second, 4.0);
    const double unigram = unigram_entropy_nats(Shard(options.data_dir + "/val.bin"));
    EXPECT_LT(report.final_train_loss, unigram);
    EXPECT_LT(report.val_loss, unigram - 0.5) << "unigram entropy " << unigram;
    EXPECT_GT(report.val_bits_per_byte, 0.0);
    EXPECT_EQ(report.steps_done, 120);
}

TEST(Train, ResumeReproducesUninterruptedRunBitForBit) {
    TempDir root("resume");
    const TrainOptions whole = tiny_train_options(root / "whole");
    run_training(whole, quiet_control());

    const TrainOptions split = tiny_train_options(root / "split");
    RunControl first = quiet_control();
    first.stop_after_step = 17;
    const TrainReport partial = run_training(split, first);
    EXPECT_EQ(partial.steps_done, 17);
    RunControl second = quiet_control();
    second.resume = true;
    const TrainReport resumed = run_training(split, second);
    EXPECT_EQ(resumed.steps_done, whole.steps);

    EXPECT_EQ(train_losses(whole.out_dir), train_losses(split.out_dir));
    expect_same_tensors(checkpoint_path_in(whole.out_dir), checkpoint_path_in(split.out_dir));
}

TEST(Train, OneAndTwoThreadsGiveIdenticalRuns) {
    TempDir root("threads");
    TrainOptions options[2] = {tiny_train_options(root / "one"), tiny_train_options(root / "two")};
    for (int run = 0; run < 2; ++run) {
        options[run].steps = 10;
        omp_set_num_threads(run + 1);
        run_training(options[run], quiet_control());
    }
    omp_set_num_threads(2);
    EXPECT_EQ(train_losses(options[0].out_dir), train_losses(options[1].out_dir));
    expect_same_tensors(checkpoint_path_in(options[0].out_dir), checkpoint_path_in(options[1].out_dir));
}

TEST(Train, ResumeWithoutCheckpointIsAClearError) {
    TempDir root("no-ckpt");
    RunControl control = quiet_control();
    control.resume = true;
    try {
        run_training(tiny_train_options(root / "missing"), control);
        FAIL() << "expected an error";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("no checkpoint"), std::string::npos) << e.what();
    }
}
