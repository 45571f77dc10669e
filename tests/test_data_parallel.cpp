// Data-parallel training: the fixed summation order and the shard plan (in process), and
// whole runs under mpirun (bit-identical to one rank, resumable on another rank count, a
// killed rank stops the job).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>

#include "data_parallel/comm.h"
#include "model/gradient_accumulator.h"
#include "core/pairwise_sum.h"
#include "data_parallel/shard_plan.h"
#include "model/gradient_sink.h"
#include "model/initialization.h"
#include "model/llama.h"
#include "optim/optimizer_state.h"
#include "test_helpers.h"
#include "gradient_buffer.h"

namespace dqt {
namespace {

using testing::CommandResult;
using testing::run_command;
using testing::read_bytes;
using testing::TempDir;

using Vector = std::vector<float>;

// Pushes `blocks` (with their data) onto a PairwiseSum, merging the data as it merges.
struct SimulatedStack {
    PairwiseSum sum;
    std::vector<Vector> data;
    void push(LeafBlock block, Vector values) {
        data.push_back(std::move(values));
        sum.push(block, [&](int lower, int upper) {
            for (size_t i = 0; i < data[lower].size(); ++i) data[lower][i] += data[upper][i];
            data.pop_back();
        });
    }
    Vector fold() {
        sum.fold([&](int lower, int upper) {
            for (size_t i = 0; i < data[lower].size(); ++i) data[lower][i] += data[upper][i];
            data.pop_back();
        });
        return data.at(0);
    }
};

std::vector<Vector> random_leaves(int count, size_t size, uint32_t seed) {
    std::mt19937 rng(seed);
    // Magnitudes over several decades, so that a different grouping changes low bits.
    std::uniform_real_distribution<float> mantissa(-1.0f, 1.0f);
    std::uniform_int_distribution<int> exponent(-8, 8);
    std::vector<Vector> leaves(static_cast<size_t>(count), Vector(size));
    for (Vector& leaf : leaves) {
        for (float& x : leaf) x = std::ldexp(mantissa(rng), exponent(rng));
    }
    return leaves;
}

TEST(PairwiseSum, AnyRankCountGivesTheBitsOfOneRank) {
    for (int leaves = 1; leaves <= 12; ++leaves) {
        const std::vector<Vector> leaf = random_leaves(leaves, 257, 100 + leaves);
        SimulatedStack one_rank;
        for (int i = 0; i < leaves; ++i) one_rank.push({i, 1}, leaf[i]);
        const Vector expected = one_rank.fold();
        for (int ranks = 2; ranks <= leaves; ++ranks) {
            if (leaves % ranks != 0) continue;
            const int per_rank = leaves / ranks;
            SimulatedStack owner;
            for (int rank = 0; rank < ranks; ++rank) {
                SimulatedStack local;  // this rank's leaves only
                for (int i = rank * per_rank; i < (rank + 1) * per_rank; ++i) local.push({i, 1}, leaf[i]);
                ASSERT_EQ(local.sum.blocks().size(), aligned_blocks(rank * per_rank, (rank + 1) * per_rank).size());
                for (size_t b = 0; b < local.data.size(); ++b) owner.push(local.sum.blocks()[b], local.data[b]);
            }
            const Vector got = owner.fold();
            EXPECT_EQ(std::memcmp(got.data(), expected.data(), got.size() * sizeof(float)), 0)
                << leaves << " leaves on " << ranks << " ranks";
        }
    }
}

TEST(PairwiseSum, GroupsLeavesAsABalancedTree) {
    const std::vector<Vector> x = random_leaves(6, 64, 7);
    SimulatedStack stack;
    for (int i = 0; i < 6; ++i) stack.push({i, 1}, x[i]);
    const Vector got = stack.fold();
    for (size_t i = 0; i < got.size(); ++i) {
        const float expected = ((x[0][i] + x[1][i]) + (x[2][i] + x[3][i])) + (x[4][i] + x[5][i]);
        EXPECT_EQ(got[i], expected) << i;
    }
    // Leaves [3, 6) of a rank: the aligned blocks [3, 4) and [4, 6).
    const std::vector<LeafBlock> blocks = aligned_blocks(3, 6);
    ASSERT_EQ(blocks.size(), 2u);
    EXPECT_EQ(blocks[0].first, 3);
    EXPECT_EQ(blocks[0].size, 1);
    EXPECT_EQ(blocks[1].first, 4);
    EXPECT_EQ(blocks[1].size, 2);
}

TEST(ShardPlan, SharesCoverTheLayoutOnChunkAndBlockBoundaries) {
    ModelConfig config;
    config.dim = 64;
    config.n_layers = 2;
    config.n_heads = 2;
    config.n_kv_heads = 2;
    config.ffn_dim = 172;  // not a multiple of 256: tensors of odd sizes
    MethodConfig method;
    method.kind = Method::dqt;
    const ParamLayout layout = make_param_layout(config, method);
    for (int ranks : {1, 2, 3, 5, 64}) {
        const ShardPlan plan = make_shard_plan(layout, ranks);
        ASSERT_EQ(plan.cut.size(), static_cast<size_t>(ranks) + 1);
        EXPECT_EQ(plan.cut.front(), 0u);
        EXPECT_EQ(plan.cut.back(), layout.total);
        EXPECT_EQ(plan.value_cut.back(), layout.value_total);
        EXPECT_EQ(plan.code_cut.back(), layout.code_total);
        for (int r = 0; r < ranks; ++r) {
            EXPECT_LE(plan.cut[r], plan.cut[r + 1]);
            EXPECT_LE(plan.value_cut[r], plan.value_cut[r + 1]);
            EXPECT_LE(plan.code_cut[r], plan.code_cut[r + 1]);
            EXPECT_TRUE(plan.cut[r] % kSquareSumChunk == 0) << plan.cut[r];
        }
        for (const ParamTensor& tensor : layout.tensors) {
            size_t covered = 0;
            for (int r = 0; r < ranks; ++r) {
                const ElementRange owned = plan.owned(tensor, r);
                if (owned.empty()) continue;
                EXPECT_EQ(owned.first, covered) << tensor.name << " rank " << r;  // in order, no gap
                EXPECT_EQ(owned.first % kStateBlock, 0u) << tensor.name;
                covered = owned.last;
                // The rank's slice of the weight arrays holds the elements it updates.
                if (!tensor.stores_codes()) {
                    EXPECT_GE(tensor.value_offset + owned.first, plan.value_cut[r]);
                    EXPECT_LE(tensor.value_offset + owned.last, plan.value_cut[r + 1]);
                } else {
                    EXPECT_GE(tensor.code_offset + code_bytes(method.grid, owned.first), plan.code_cut[r]);
                    EXPECT_LE(tensor.code_offset + code_bytes(method.grid, owned.last), plan.code_cut[r + 1]);
                }
            }
            EXPECT_EQ(covered, tensor.count()) << tensor.name << " on " << ranks << " ranks";
        }
    }
}

TEST(ShardedState, ASliceOfTheWholeStateCopiesItsElementsAndBlocks) {
    const size_t count = 3 * kStateBlock + 17;
    TensorMoments whole(0, count, StateDtype::q8);
    for (size_t i = 0; i < count; ++i) {
        whole.m.as<uint8_t>()[i] = static_cast<uint8_t>(i * 7);
        whole.v.as<uint8_t>()[i] = static_cast<uint8_t>(i * 13);
    }
    for (size_t b = 0; b < whole.blocks(); ++b) {
        whole.m_absmax[b] = 1.0f + b;
        whole.v_absmax[b] = 10.0f + b;
    }
    TensorMoments part(kStateBlock, 2 * kStateBlock + 17, StateDtype::q8);
    copy_moments_range(whole, part);
    for (size_t i = 0; i < part.count; ++i) {
        ASSERT_EQ(part.m.as<uint8_t>()[i], whole.m.as<uint8_t>()[kStateBlock + i]) << i;
        ASSERT_EQ(part.v.as<uint8_t>()[i], whole.v.as<uint8_t>()[kStateBlock + i]) << i;
    }
    ASSERT_EQ(part.blocks(), 3u);
    for (size_t b = 0; b < part.blocks(); ++b) {
        EXPECT_EQ(part.m_absmax[b], whole.m_absmax[b + 1]);
        EXPECT_EQ(part.v_absmax[b], whole.v_absmax[b + 1]);
    }
}

// On one process the accumulator must hold exactly the pairwise sum of the leaves' gradients,
// each computed alone into a zeroed GradientBuffer (the plain sink): tied and untied models.
TEST(GradientAccumulator, SumsSeparateLeafGradientsPairwise) {
    for (bool tied : {false, true}) {
        ModelConfig config;
        config.dim = 32;
        config.n_layers = 2;
        config.n_heads = 2;
        config.n_kv_heads = 2;
        config.ffn_dim = 64;
        config.seq_len = 16;
        config.tie_embeddings = tied;
        MethodConfig method;
        method.kind = Method::dqt;
        method.quantize_embedding = method.quantize_head = tied;
        ModelParameters model(config, method);
        initialize_parameters(model, 3);
        const int leaves = 4, batch = 2;
        Activations acts(config, batch, config.seq_len);
        auto fill = [&](int leaf) {
            std::mt19937 rng(50 + leaf);
            for (size_t i = 0; i < acts.tokens.size(); ++i) {
                acts.tokens[i] = static_cast<int32_t>(rng() % 256);
                acts.targets[i] = static_cast<int32_t>(rng() % 256);
            }
        };
        const float grad_scale = 1.0f / (leaves * batch * config.seq_len);
        std::vector<Vector> leaf_gradients;
        for (int leaf = 0; leaf < leaves; ++leaf) {
            GradientBuffer buffer(model.layout);
            fill(leaf);
            model_forward(model, acts, true);
            model_backward(model, acts, grad_scale, buffer);
            leaf_gradients.emplace_back(buffer.values().begin(), buffer.values().end());
        }
        const std::vector<Vector>& g = leaf_gradients;
        Vector expected(model.layout.total);
        for (size_t i = 0; i < expected.size(); ++i) expected[i] = (g[0][i] + g[1][i]) + (g[2][i] + g[3][i]);

        GradientAccumulator accumulator(model, 0, leaves);
        for (int leaf = 0; leaf < leaves; ++leaf) {
            accumulator.begin_leaf(leaf);
            fill(leaf);
            model_forward(model, acts, true);
            model_backward(model, acts, grad_scale, accumulator);
        }
        accumulator.check_complete();
        accumulator.fold(0, model.layout.total);
        EXPECT_EQ(std::memcmp(accumulator.slot(0), expected.data(), expected.size() * sizeof(float)), 0)
            << "tied " << tied;
    }
}

// ---- Whole runs under mpirun ------------------------------------------------------------

// As root, Open MPI needs --allow-run-as-root; --oversubscribe starts 2 ranks on a 1-core box.
std::string mpirun(int ranks) {
    return "mpirun --allow-run-as-root --oversubscribe -np " + std::to_string(ranks) + " " + DQT_BINARY;
}

// A tiny run with a global batch of 4 micro-batches (on 2 ranks: 2 per rank, merged on the
// rank, then across ranks), one compute thread per rank. The out folder is the relative
// "run", so runs in different folders write byte-identical files.
std::string tiny_run_args(const std::string& extra) {
    return " train --data " + testing::tiny_dataset_dir() +
           " --out run --dim 32 --layers 2 --heads 2 --ffn 64 --seq-len 32 --batch 1 --grad-accum 4 --steps 6"
           " --eval-every 3 --eval-tokens 1024 --threads 1 --no-sample --quiet " + extra;
}

CommandResult run_in(const std::string& folder, const std::string& command) {
    std::filesystem::create_directories(folder);
    return run_command("cd " + folder + " && " + command);
}

// The evaluation lines of a metrics log (the others carry timings).
std::string eval_lines(const std::string& metrics_path) {
    std::istringstream log(read_bytes(metrics_path));
    std::string line, evals;
    while (std::getline(log, line)) {
        if (line.find("\"type\":\"eval\"") != std::string::npos) evals += line + "\n";
    }
    return evals;
}

TEST(DataParallelRun, TwoRanksWriteTheBitsOfOneForEveryMethod) {
    TempDir root("dp-identical");
    for (const std::string method : {"--method fp", "--method bitnet", "--method dqt --dqt-recipe reference", "--method dqt",
                                     "--method dqt --dqt-residual-bits 4", "--method dqt --bits 8 --optim-state 8 --tie-embeddings "
                                     "--quantize-embedding --quantize-head"}) {
        // One folder per rank count, reused by each method: --overwrite starts over in it.
        const CommandResult one = run_in(root / "one", std::string(DQT_BINARY) + tiny_run_args(method + " --overwrite"));
        ASSERT_EQ(one.exit_code, 0) << one.output;
        const CommandResult two = run_in(root / "two", mpirun(2) + tiny_run_args(method + " --overwrite"));
        ASSERT_EQ(two.exit_code, 0) << two.output;
        // Weights, optimizer state, step and options: the whole checkpoint, byte for byte.
        const std::string a = read_bytes(root / "one/run/checkpoint.dqt");
        const std::string b = read_bytes(root / "two/run/checkpoint.dqt");
        ASSERT_GT(a.size(), 10000u);
        EXPECT_TRUE(a == b) << method;
        // Validation (split over the ranks) and its sum: the same bits too.
        const std::string evals = eval_lines(root / "one/run/metrics.jsonl");
        EXPECT_EQ(std::count(evals.begin(), evals.end(), '\n'), 2) << evals;
        EXPECT_EQ(evals, eval_lines(root / "two/run/metrics.jsonl")) << method;
        // The two-rank run did communicate, and says how much.
        const std::string metrics = read_bytes(root / "two/run/metrics.jsonl");
        EXPECT_NE(metrics.find("\"ranks\":2"), std::string::npos);
        EXPECT_EQ(metrics.find("\"gradient_bytes_sent\":0,"), std::string::npos) << metrics;
        EXPECT_EQ(read_bytes(root / "one/run/metrics.jsonl").find("\"ranks\":2"), std::string::npos);
    }
}

TEST(DataParallelRun, ACheckpointOfTwoRanksResumesOnOne) {
    TempDir root("dp-resume");
    // The learned scale's moments are replicated on every rank and saved once; the sub-grid
    // residuals are sharded like the moments, gathered for the checkpoint and sliced on resume.
    const std::string method = "--method dqt --optim-state 8 --dqt-scale learned --dqt-residual-bits 3";
    ASSERT_EQ(run_in(root / "whole", std::string(DQT_BINARY) + tiny_run_args(method)).exit_code, 0);
    const CommandResult first = run_in(root / "split", mpirun(2) + tiny_run_args(method + " --stop-after 3"));
    ASSERT_EQ(first.exit_code, 0) << first.output;
    const CommandResult rest =
        run_in(root / "split", std::string(DQT_BINARY) + " train --out run --resume --threads 1 --no-sample --quiet");
    ASSERT_EQ(rest.exit_code, 0) << rest.output;
    EXPECT_TRUE(read_bytes(root / "whole/run/checkpoint.dqt") == read_bytes(root / "split/run/checkpoint.dqt"));
}

// The first step's gradient bytes sent by rank 0, from a metrics log.
long first_gradient_bytes(const std::string& metrics_path) {
    const std::string log = read_bytes(metrics_path), key = "\"gradient_bytes_sent\":";
    const size_t at = log.find(key);
    return at == std::string::npos ? -1 : std::stol(log.substr(at + key.size()));
}

// --compress-gradients / --compress-weights: two runs give the same bits (also with another
// thread count); a run stopped and
// resumed on the same rank count (its residuals and exact weights restored from the
// checkpoint, written in the background) gives them too; another rank count resumes as well.
TEST(DataParallelRun, CompressedRunsRepeatBitForBitAndResumeExactly) {
    TempDir root("dp-compressed");
    for (const std::string method : {"--method bitnet --compress-gradients 4 --compress-weights 4",
                                     "--method dqt --compress-gradients 8",
                                     "--method fp --compress-gradients 8 --compress-weights 8"}) {
        SCOPED_TRACE(method);
        const std::string args = tiny_run_args(method + " --overwrite --checkpoint-every 0");
        ASSERT_EQ(run_in(root / "a", mpirun(2) + args).exit_code, 0);
        const CommandResult again = run_in(root / "b", mpirun(2) + args);
        ASSERT_EQ(again.exit_code, 0) << again.output;
        const std::string a = read_bytes(root / "a/run/checkpoint.dqt");
        ASSERT_GT(a.size(), 10000u);
        EXPECT_TRUE(a == read_bytes(root / "b/run/checkpoint.dqt"));
        if (method.find("bitnet") != std::string::npos) {
            // Encoding is block by block and the sum elementwise: the thread count does not matter.
            std::string threaded = args;
            threaded.replace(threaded.find("--threads 1"), 11, "--threads 2");
            // Unbound, so that each rank may use 2 CPUs (mpirun binds a rank to one core).
            const std::string unbound = "mpirun --allow-run-as-root --oversubscribe --bind-to none -np 2 ";
            const CommandResult two_threads = run_in(root / "c", unbound + DQT_BINARY + threaded);
            ASSERT_EQ(two_threads.exit_code, 0) << two_threads.output;
            EXPECT_TRUE(a == read_bytes(root / "c/run/checkpoint.dqt"));
        }

        const CommandResult split = run_in(root / "split", mpirun(2) + tiny_run_args(method + " --overwrite --checkpoint-every 0 --stop-after 3 --async-checkpoint"));
        ASSERT_EQ(split.exit_code, 0) << split.output;
        std::filesystem::remove_all(root / "other");
        std::filesystem::copy(root / "split", root / "other", std::filesystem::copy_options::recursive);
        const CommandResult rest = run_in(root / "split", mpirun(2) + " train --out run --resume --threads 1 --no-sample --quiet");
        ASSERT_EQ(rest.exit_code, 0) << rest.output;
        EXPECT_TRUE(a == read_bytes(root / "split/run/checkpoint.dqt"));
        // One rank sends nothing and needs no residual: it goes on from the saved weights. Back
        // on 2 ranks, its checkpoint holds no residuals: they start from zero, and the run says so.
        const CommandResult one = run_in(root / "other", std::string(DQT_BINARY) + " train --out run --resume --threads 1 --no-sample --quiet --stop-after 4");
        EXPECT_EQ(one.exit_code, 0) << one.output;
        const CommandResult back = run_in(root / "other", mpirun(2) + " train --out run --resume --threads 1 --no-sample");
        EXPECT_EQ(back.exit_code, 0) << back.output;
        EXPECT_NE(back.output.find("error feedback starts from zero"), std::string::npos) << back.output;

        // Compression did act: other bits than fp32 transfers, a fraction of their bytes.
        const CommandResult plain = run_in(root / "plain", mpirun(2) + tiny_run_args(method.substr(0, method.find(" --compress")) + " --overwrite --checkpoint-every 0"));
        ASSERT_EQ(plain.exit_code, 0) << plain.output;
        EXPECT_FALSE(a == read_bytes(root / "plain/run/checkpoint.dqt"));
        const long compressed_bytes = first_gradient_bytes(root / "a/run/metrics.jsonl");
        const long fp32_bytes = first_gradient_bytes(root / "plain/run/metrics.jsonl");
        EXPECT_GT(compressed_bytes, 0);
        EXPECT_LT(compressed_bytes * 2, fp32_bytes) << compressed_bytes << " vs " << fp32_bytes;
    }
}

TEST(DataParallelRun, RankCountMustDivideTheMicroBatches) {
    TempDir root("dp-divide");
    const CommandResult result = run_in(root.path.string(), mpirun(2) + tiny_run_args("--grad-accum 3"));
    EXPECT_NE(result.exit_code, 0);
    // Both ranks refuse; which one's line mpirun prints before it stops the other depends on
    // the scheduler (under load, rank 1's came first).
    EXPECT_TRUE(result.output.find("dqt: error: rank 0 of 2: --grad-accum 3 cannot be shared by 2 ranks") !=
                    std::string::npos ||
                result.output.find("dqt: error: rank 1 of 2: --grad-accum 3 cannot be shared by 2 ranks") !=
                    std::string::npos)
        << result.output;
    EXPECT_FALSE(std::filesystem::exists(root / "run/checkpoint.dqt"));
}

TEST(DataParallelRun, OtherCommandsRefuseSeveralRanks) {
    const CommandResult result = run_command(mpirun(2) + " eval nothing.dqt");
    EXPECT_NE(result.exit_code, 0);
    EXPECT_NE(result.output.find("only `dqt train` runs on several MPI ranks"), std::string::npos) << result.output;
}

// A /proc file of a process that may exit while it is read: empty then (the read fails with
// ESRCH, which libstdc++'s file buffer throws as ios_base::failure).
std::string read_proc_file(const std::string& path) {
    try {
        return read_bytes(path);
    } catch (const std::ios_base::failure&) {
        return "";
    }
}

// The rank-`rank` process among mpirun's children (Open MPI puts the rank in their environment).
pid_t find_rank_process(pid_t mpirun_pid, int rank) {
    const std::string wanted = "OMPI_COMM_WORLD_RANK=" + std::to_string(rank);
    for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
        const std::string name = entry.path().filename().string();
        if (name.find_first_not_of("0123456789") != std::string::npos) continue;
        // "pid (command) state parent ...": the command may hold spaces, so parse after its ')'.
        const std::string stat = read_proc_file(entry.path().string() + "/stat");
        const size_t command_end = stat.rfind(')');
        if (command_end == std::string::npos) continue;
        std::istringstream fields(stat.substr(command_end + 1));
        std::string state;
        pid_t parent = 0;
        fields >> state >> parent;
        if (parent != mpirun_pid) continue;
        const std::string environment = read_proc_file(entry.path().string() + "/environ");
        if (environment.find(wanted + '\0') != std::string::npos) return std::stoi(name);
    }
    return 0;
}

// Starts `command` in `folder` with output to `log`; returns the shell's pid (exec'd into mpirun).
pid_t start_in_background(const std::string& folder, const std::string& command, const std::string& log) {
    const pid_t child = fork();
    if (child == 0) {
        const std::string shell = "cd " + folder + " && exec " + command + " > " + log + " 2>&1";
        execl("/bin/sh", "sh", "-c", shell.c_str(), static_cast<char*>(nullptr));
        _exit(127);
    }
    return child;
}

// SIGINT sent to the ranks (not to mpirun, which kills them at once): they agree on a step,
// save a checkpoint and exit cleanly. (The heap corruption once seen with a SIGINT handler
// under Open MPI was intermittent, about 1 run in 8: this test checks the stop, and cannot
// promise its absence.)
TEST(DataParallelRun, InterruptedRanksStopTogetherWithACheckpoint) {
    TempDir root("dp-interrupt");
    const std::string log = root / "log";
    const std::string command =
        mpirun(2) + tiny_run_args("--steps 1000000 --checkpoint-every 0 --eval-every 0 --log-every 1");
    const pid_t child = start_in_background(root.path.string(), command, log);
    ASSERT_GT(child, 0);
    pid_t ranks[2] = {0, 0};
    for (int tries = 0; tries < 600; ++tries) {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        for (int r = 0; r < 2; ++r) {
            if (ranks[r] == 0) ranks[r] = find_rank_process(child, r);
        }
        if (ranks[0] && ranks[1] && read_bytes(root / "run/metrics.jsonl").find("\"step\":20,") != std::string::npos) {
            break;
        }
    }
    ASSERT_TRUE(ranks[0] && ranks[1]) << read_bytes(log);
    for (pid_t rank : ranks) ASSERT_EQ(kill(rank, SIGINT), 0);
    int status = 0;
    ASSERT_EQ(waitpid(child, &status, 0), child);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << read_bytes(log);
    const CommandResult eval =
        run_command(std::string(DQT_BINARY) + " eval " + (root / "run/checkpoint.dqt") + " --eval-tokens 1024");
    EXPECT_EQ(eval.exit_code, 0) << eval.output;
}

TEST(DataParallelRun, AKilledRankStopsTheJobAndLeavesTheLastCheckpointIntact) {
    TempDir root("dp-kill");
    const std::string log = root / "log";
    // A run far too long to finish, checkpointing every 5 steps.
    const std::string command = mpirun(2) + tiny_run_args("--steps 1000000 --checkpoint-every 5 --eval-every 0");
    const pid_t child = start_in_background(root.path.string(), command, log);
    ASSERT_GT(child, 0);
    const std::string checkpoint = root / "run/checkpoint.dqt";
    pid_t rank1 = 0;
    for (int tries = 0; tries < 600 && (rank1 == 0 || !std::filesystem::exists(checkpoint)); ++tries) {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        if (rank1 == 0) rank1 = find_rank_process(child, 1);
    }
    ASSERT_NE(rank1, 0) << read_bytes(log);
    ASSERT_TRUE(std::filesystem::exists(checkpoint)) << read_bytes(log);
    ASSERT_EQ(kill(rank1, SIGKILL), 0);
    int status = 0;
    ASSERT_EQ(waitpid(child, &status, 0), child);
    EXPECT_FALSE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    const std::string output = read_bytes(log);
    EXPECT_NE(output.find("rank 1"), std::string::npos) << output;
    EXPECT_NE(output.find("signal 9"), std::string::npos) << output;
    // The checkpoint on disk is a whole one: it evaluates.
    const CommandResult eval = run_command(std::string(DQT_BINARY) + " eval " + checkpoint + " --eval-tokens 1024");
    EXPECT_EQ(eval.exit_code, 0) << eval.output;
    EXPECT_NE(eval.output.find("val loss"), std::string::npos) << eval.output;
}

}  // namespace
}  // namespace dqt
