// The `dqt` command line as a user meets it: bad input gets one clear error line and a
// non-zero exit, and nothing is left half-written.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "export/gguf_model.h"
#include "infer/inference_model.h"
#include "io/folder_lock.h"
#include "model/config.h"
#include "test_helpers.h"

using namespace dqt;
using namespace dqt::testing;
using dqt::ModelConfig;

namespace {

CommandResult run_dqt(const std::string& arguments) { return run_command(std::string(DQT_BINARY) + " " + arguments); }

// One line starting "dqt: error:" that contains `needle`, and a failing exit code.
void expect_one_line_error(const CommandResult& result, const std::string& needle) {
    EXPECT_NE(result.exit_code, 0) << result.output;
    EXPECT_EQ(result.output.rfind("dqt: error: ", 0), 0u) << result.output;
    EXPECT_EQ(std::count(result.output.begin(), result.output.end(), '\n'), 1) << result.output;
    EXPECT_TRUE(!result.output.empty() && result.output.back() == '\n') << "output after the error: " << result.output;
    EXPECT_NE(result.output.find(needle), std::string::npos) << "expected '" << needle << "' in: " << result.output;
}

std::string tiny_train_args(const std::string& out_dir) {
    return "train --data " + tiny_dataset_dir() + " --out " + out_dir +
           " --dim 32 --layers 2 --heads 2 --ffn 64 --seq-len 32 --batch 4 --eval-tokens 1024 --quiet";
}

void write_bytes(const std::string& path, const std::string& bytes) {
    std::ofstream file(path, std::ios::binary);
    file << bytes;
}

}  // namespace

TEST(Cli, HelpListsSubcommands) {
    const CommandResult result = run_dqt("--help");
    EXPECT_EQ(result.exit_code, 0);
    for (const char* command : {"train", "eval", "generate", "data", "bench"}) {
        EXPECT_NE(result.output.find(command), std::string::npos) << command;
    }
    EXPECT_EQ(run_dqt("train --help").exit_code, 0);
}

TEST(Cli, UnknownFlagIsRejected) {
    expect_one_line_error(run_dqt("train --no-such-flag 3"), "--no-such-flag");
    expect_one_line_error(run_dqt("trian --steps 3"), "unknown command 'trian': use one of data, train");
}

TEST(Cli, ImpossibleConfigsAreRejectedBeforeAnythingIsWritten) {
    TempDir root("cli-config");
    const std::string out = root / "run";
    expect_one_line_error(run_dqt(tiny_train_args(out) + " --heads 3"), "must divide dim");
    expect_one_line_error(run_dqt(tiny_train_args(out) + " --layers 0"), "n_layers must be positive");
    expect_one_line_error(run_dqt(tiny_train_args(out) + " --lr -0.1"), "--lr must be a positive finite number");
    // Non-finite numbers: accepted before, they trained into a checkpoint nothing could load.
    // Six significant digits: std::to_string wrote 31 digits here and 300 for a double 1e300.
    expect_one_line_error(run_dqt(tiny_train_args(out) + " --lr -1e30"), "--lr must be a positive finite number, got -1e+30");
    expect_one_line_error(run_dqt(tiny_train_args(out) + " --lr inf"), "--lr must be a positive finite number");
    expect_one_line_error(run_dqt(tiny_train_args(out) + " --lr nan"), "--lr must be a positive finite number");
    expect_one_line_error(run_dqt(tiny_train_args(out) + " --init-std inf"), "init_std must be a positive finite");
    expect_one_line_error(run_dqt(tiny_train_args(out) + " --rope-theta inf"), "rope_theta must be a positive finite");
    expect_one_line_error(run_dqt(tiny_train_args(out) + " --adam-eps inf"), "--adam-eps must be a positive finite");
    expect_one_line_error(run_dqt(tiny_train_args(out) + " --weight-decay inf"), "--weight-decay must be a finite");
    expect_one_line_error(run_dqt(tiny_train_args(out) + " --grad-clip inf"), "--grad-clip must be a finite");
    expect_one_line_error(run_dqt(tiny_train_args(out) + " --threads -3"), "--threads must be 0 (one per CPU)");
    expect_one_line_error(run_dqt(tiny_train_args(out) + " --threads 10000"), "--threads 10000 is more than the");
    // Seeds are unsigned: "-1" became 2^64 - 1 and 2^64 was clamped, both in silence.
    expect_one_line_error(run_dqt(tiny_train_args(out) + " --seed -1"), "--seed: must be a whole number from 0");
    expect_one_line_error(run_dqt(tiny_train_args(out) + " --seed 18446744073709551616"), "got 18446744073709551616");
    expect_one_line_error(run_dqt(tiny_train_args(out) + " --stop-after -1"), "--stop-after: must be positive");
    // Sizes beyond the machine or the data: they allocated gigabytes and died in std::bad_alloc.
    expect_one_line_error(run_dqt(tiny_train_args(out) + " --layers 2000000000"), "GiB of memory");
    expect_one_line_error(run_dqt(tiny_train_args(out) + " --grad-accum 2000000000"),
                          "is more than the whole training split");
    // 2e9 x 2e9 x 32 tokens wrapped in int64 to a negative count that passed the check above.
    expect_one_line_error(run_dqt(tiny_train_args(out) + " --batch 2000000000 --grad-accum 2000000000"),
                          "tokens per step is out of range");
    expect_one_line_error(run_dqt(tiny_train_args(out) + " --seq-len 2000000000"), "seq_len must be at most 1048576");
    // Every layer's saved softmax, (batch, heads, seq_len, seq_len): 23 TiB here, allocated layer
    // by layer (16 GiB touched in 16 s at --seq-len 100000 on the defaults) before the check knew it.
    expect_one_line_error(run_dqt(tiny_train_args(out) + " --layers 1000 --heads 16 --batch 1 --seq-len 20000 "
                                                          "--eval-tokens 20000"),
                          "Adam state and activations, more than this machine's");
    // And what grows with batch x seq_len: a wide FFN's saved gate, up and products, 0.4 TiB for
    // 0.16 GB of weights (before, the check passed, the run folder was made, then the allocation failed).
    expect_one_line_error(run_dqt(tiny_train_args(out) + " --layers 1 --ffn 100000 --batch 6000"),
                          "Adam state and activations, more than this machine's");
    EXPECT_FALSE(std::filesystem::exists(out + "/checkpoint.dqt"));
    write_bytes(root / "bad.json", "{\"dim\": 64, \"n_layrs\": 2}");
    expect_one_line_error(run_dqt(tiny_train_args(out) + " --config " + (root / "bad.json")), "unknown key 'n_layrs'");
    // Numbers are read exactly: 2.9 became 2 and 2^32 + 64 became 64 before. (Keys the flags
    // above do not set: a flag given on the command line wins over the file.)
    write_bytes(root / "fraction.json", "{\"n_kv_heads\": 2.9}");
    expect_one_line_error(run_dqt(tiny_train_args(out) + " --config " + (root / "fraction.json")),
                          "n_kv_heads must be a whole number, got '2.9'");
    write_bytes(root / "typed.json", "{\"rope_theta\": \"nan\"}");  // named, not nlohmann's type_error.302
    expect_one_line_error(run_dqt(tiny_train_args(out) + " --config " + (root / "typed.json")),
                          "rope_theta must be a number, got '\"nan\"'");
    write_bytes(root / "wide.json", "{\"vocab_size\": 4294967360}");
    expect_one_line_error(run_dqt(tiny_train_args(out) + " --config " + (root / "wide.json")),
                          "vocab_size = '4294967360' is out of range");
    expect_one_line_error(run_dqt(tiny_train_args(out) + " --dim 4294967360"), "--dim");
}

// The CPU build (CI's, and the README's) knows no GPU: --device cuda says how to get one, before
// anything is written. Bad device names and combinations are refused like other flags.
TEST(Cli, DeviceCudaWithoutACudaBuildIsOneLine) {
    TempDir root("cli-device");
    const std::string out = root / "run";
    expect_one_line_error(run_dqt(tiny_train_args(out) + " --device cuda"), "built without CUDA");
    expect_one_line_error(run_dqt(tiny_train_args(out) + " --device tpu"), "--device");
    expect_one_line_error(run_dqt(tiny_train_args(out) + " --device cuda --fused-update"), "drop --fused-update");
    expect_one_line_error(run_dqt(tiny_train_args(out) + " --recompute"), "drop --recompute");
    EXPECT_FALSE(std::filesystem::exists(out + "/checkpoint.dqt"));
    EXPECT_FALSE(std::filesystem::exists(out + "/config.json"));
}

TEST(Cli, MissingInputsNameThePath) {
    TempDir root("cli-missing");
    expect_one_line_error(run_dqt("eval " + (root / "nope.dqt")), "nope.dqt");
    expect_one_line_error(run_dqt("generate " + (root / "nope.dqt")), "nope.dqt");
    // Named as a missing model, not in a checkpoint's words, whatever its extension.
    expect_one_line_error(run_dqt("generate " + (root / "nope.gguf")), "nope.gguf not found: give a checkpoint, a GGUF");
    // A device is no file: reading /dev/zero as a model grew memory to gigabytes.
    expect_one_line_error(run_dqt("eval /dev/zero"), "/dev/zero");
    expect_one_line_error(run_dqt("generate /dev/zero"), "/dev/zero");
    expect_one_line_error(run_dqt("serve " + (root / "nope.dqt")), "nope.dqt");
    expect_one_line_error(run_dqt("train --data " + (root / "no-data") + " --out " + (root / "run") + " --quiet"),
                          "no-data");
    expect_one_line_error(run_dqt("data --corpus " + (root / "no-corpus") + " --out " + (root / "d")), "no-corpus");
    expect_one_line_error(run_dqt("eval " + (root / "")), "is a folder without config.json");
    // Nor is a FIFO: opening one for reading waited for a writer, so every reader hung. The
    // timeout turns a hang back into a failure here.
    const std::string fifo = root / "fifo";
    ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
    const auto within_30_s = [](const std::string& arguments) {
        return run_command("timeout 30 " + std::string(DQT_BINARY) + " " + arguments);
    };
    for (const char* command : {"eval", "generate", "export", "serve", "bench serve"})
        expect_one_line_error(within_30_s(std::string(command) + " " + fifo), "not a regular file");
    expect_one_line_error(within_30_s("data --corpus " + fifo + " --out " + (root / "d")), "not a regular file");
    expect_one_line_error(within_30_s("train --config " + fifo + " --out " + (root / "run")), "not a regular file");
}

TEST(Cli, CorruptCheckpointsAreRefused) {
    TempDir root("cli-corrupt");
    const std::string out = root / "run";
    const CommandResult trained = run_dqt(tiny_train_args(out) + " --steps 3 --no-sample");
    ASSERT_EQ(trained.exit_code, 0) << trained.output;
    const std::string checkpoint = out + "/checkpoint.dqt";
    std::ifstream file(checkpoint, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
    ASSERT_GT(bytes.size(), 1000u);

    write_bytes(root / "magic.dqt", "NOTDQT!!" + bytes.substr(8));
    expect_one_line_error(run_dqt("eval " + (root / "magic.dqt")), "magic");
    write_bytes(root / "short.dqt", bytes.substr(0, bytes.size() / 2));
    expect_one_line_error(run_dqt("eval " + (root / "short.dqt")), "truncated");
    std::string flipped = bytes;
    flipped[bytes.size() / 2] ^= 0x5a;
    write_bytes(root / "flipped.dqt", flipped);
    expect_one_line_error(run_dqt("eval " + (root / "flipped.dqt")), "checksum");

    // The intact checkpoint still evaluates and generates.
    const CommandResult eval = run_dqt("eval " + checkpoint);
    EXPECT_EQ(eval.exit_code, 0) << eval.output;
    EXPECT_NE(eval.output.find("val loss"), std::string::npos) << eval.output;
    // Through an int8 KV cache, as generation with one would predict; the cache is named.
    const CommandResult eval_int8 = run_dqt("eval " + checkpoint + " --kv-cache int8");
    EXPECT_EQ(eval_int8.exit_code, 0) << eval_int8.output;
    EXPECT_NE(eval_int8.output.find(", int8 KV cache): val loss"), std::string::npos) << eval_int8.output;
    expect_one_line_error(run_dqt("eval " + checkpoint + " --kv-cache q8"), "--kv-cache");
    const CommandResult generated = run_dqt("generate " + checkpoint + " --prompt Our --tokens 20 --seed 3");
    EXPECT_EQ(generated.exit_code, 0) << generated.output;
    EXPECT_EQ(generated.output.rfind("Our", 0), 0u) << generated.output;
    // The tiny run's context is 32 tokens (bytes): a 40-byte prompt leaves no room.
    expect_one_line_error(run_dqt("generate " + checkpoint + " --prompt " + std::string(40, 'a')),
                          "the prompt is 40 tokens, but the model's context holds 32");
    expect_one_line_error(run_dqt("generate " + checkpoint + " --kv-cache q4"), "--kv-cache");
    expect_one_line_error(run_dqt("generate " + checkpoint + " --temperature nan"), "--temperature must be a finite");
    expect_one_line_error(run_dqt("generate " + checkpoint + " --temperature inf"), "--temperature must be a finite");
    expect_one_line_error(run_dqt("generate " + checkpoint + " --top-p nan"), "--top-p must be in (0, 1]");
    // CLI11's own range check printed the largest double in 300 digits here.
    expect_one_line_error(run_dqt("generate " + checkpoint + " --top-k -2"), "--top-k: must be 0 or more, got -2 (");
    // --stop ends the text before the first occurrence of the string: two letters from the
    // continuation (the 3-step model's text is mostly bytes no shell argument can hold). The
    // text printed is what precedes the summary on stderr (stdout's newline comes at exit).
    const auto printed_text = [](const std::string& output) { return output.substr(0, output.find("3 prompt tokens, ")); };
    const std::string continuation = printed_text(generated.output).substr(3);
    size_t letters = 0;
    while (letters + 1 < continuation.size() &&
           !(std::isalpha(static_cast<unsigned char>(continuation[letters])) &&
             std::isalpha(static_cast<unsigned char>(continuation[letters + 1]))))
        ++letters;
    ASSERT_LT(letters + 1, continuation.size()) << "no two letters in: " << continuation;
    const std::string stop = continuation.substr(letters, 2);
    const CommandResult stopped = run_dqt("generate " + checkpoint + " --prompt Our --tokens 20 --seed 3 --stop " + stop);
    EXPECT_EQ(stopped.exit_code, 0) << stopped.output;
    EXPECT_EQ(printed_text(stopped.output), "Our" + continuation.substr(0, continuation.find(stop)));
    EXPECT_NE(stopped.output.find(" generated "), std::string::npos) << stopped.output;
    // dqt serve refuses what it cannot serve before it listens.
    expect_one_line_error(run_dqt("serve " + checkpoint + " --parallel 0"), "--parallel");
    expect_one_line_error(run_dqt("serve " + checkpoint + " --context 99"), "--context must be from 2 to the model's 32");
    expect_one_line_error(run_dqt("serve " + checkpoint + " --host 203.0.113.7 --port 0"), "cannot listen on 203.0.113.7");
    expect_one_line_error(run_dqt("serve " + checkpoint + " --allow-origin \"\""), "--allow-origin: an origin is");
    // More tokens than the context holds: generation stops at the context and says so.
    const CommandResult long_request = run_dqt("generate " + checkpoint + " --prompt Our --tokens 1000");
    EXPECT_EQ(long_request.exit_code, 0) << long_request.output;
    EXPECT_NE(long_request.output.find("29 generated"), std::string::npos) << long_request.output;
    EXPECT_NE(long_request.output.find("stopped at the model's context of 32 tokens, before the 1000 asked for"),
              std::string::npos)
        << long_request.output;
}

TEST(Cli, ResumeRejectsChangedSettings) {
    TempDir root("cli-resume");
    const std::string out = root / "run";
    ASSERT_EQ(run_dqt(tiny_train_args(out) + " --steps 6 --stop-after 3 --no-sample").exit_code, 0);
    expect_one_line_error(run_dqt("train --out " + out + " --resume --lr 0.5 --quiet"), "--lr cannot be combined");
    const CommandResult resumed = run_dqt("train --out " + out + " --resume --quiet --no-sample");
    EXPECT_EQ(resumed.exit_code, 0) << resumed.output;
    // Resuming the finished run changes nothing (it appended the final eval and memory lines
    // to metrics.jsonl a second time).
    const std::string metrics = read_bytes(out + "/metrics.jsonl");
    const std::string checkpoint = read_bytes(out + "/checkpoint.dqt");
    const CommandResult again = run_dqt("train --out " + out + " --resume --no-sample");
    EXPECT_EQ(again.exit_code, 0) << again.output;
    EXPECT_NE(again.output.find("already finished its 6 steps"), std::string::npos) << again.output;
    EXPECT_TRUE(read_bytes(out + "/metrics.jsonl") == metrics);
    EXPECT_TRUE(read_bytes(out + "/checkpoint.dqt") == checkpoint);
}

// A run folder that holds a checkpoint is not started over by accident (a 30-step checkpoint was
// silently replaced by a 4-step one), and two processes never write one folder at once.
TEST(Cli, NothingReplacesARunUnlessAskedAndOneProcessWritesAFolder) {
    TempDir root("cli-overwrite");
    const std::string out = root / "run";
    ASSERT_EQ(run_dqt(tiny_train_args(out) + " --steps 3 --no-sample").exit_code, 0);
    const std::string checkpoint = read_bytes(out + "/checkpoint.dqt");
    expect_one_line_error(run_dqt(tiny_train_args(out) + " --steps 2 --no-sample"),
                          "already holds a run (" + out + "/checkpoint.dqt): continue it with --resume");
    EXPECT_EQ(read_bytes(out + "/checkpoint.dqt"), checkpoint);
    expect_one_line_error(run_dqt(tiny_train_args(out) + " --overwrite --resume"), "excludes --overwrite");
    const CommandResult over = run_dqt(tiny_train_args(out) + " --steps 2 --no-sample --overwrite");
    EXPECT_EQ(over.exit_code, 0) << over.output;
    EXPECT_NE(read_bytes(out + "/checkpoint.dqt"), checkpoint);

    const std::string busy = root / "busy";
    std::filesystem::create_directories(busy);
    const dqt::FolderLock held(busy);  // as a running `dqt train` holds it
    expect_one_line_error(run_dqt(tiny_train_args(busy) + " --steps 2 --no-sample"),
                          "another dqt process is writing " + busy);
    EXPECT_FALSE(std::filesystem::exists(busy + "/config.json"));
}

// A run whose loss turns non-finite (lr 1e30 without clipping: step 1 blows the weights up,
// step 2's loss is NaN) stops with an error and keeps the checkpoint of step 1, where before it
// exited 0 and saved NaN weights over it; with --on-nonfinite skip it goes on without updates.
TEST(Cli, ADivergedRunStopsAndKeepsItsLastGoodCheckpoint) {
    TempDir root("cli-diverge");
    const std::string out = root / "run";
    const std::string args = tiny_train_args(out) + " --steps 4 --lr 1e30 --grad-clip 0 --no-sample";
    const CommandResult diverged = run_dqt(args + " --checkpoint-every 1");
    expect_one_line_error(diverged, "step 2: the loss or the gradient norm is not finite");
    expect_one_line_error(diverged, "the run diverged; " + out + "/checkpoint.dqt is kept as it was");
    const CommandResult evaluated = run_dqt("eval " + out + "/checkpoint.dqt --eval-tokens 1024");
    EXPECT_NE(evaluated.output.find("(step 1,"), std::string::npos) << evaluated.output;
    // Started over, diverged before its first checkpoint: the old run's checkpoint went with
    // the start, not left beside a config.json that describes another run.
    expect_one_line_error(run_dqt(args + " --overwrite"), "step 2: the loss or the gradient norm is not finite");
    EXPECT_FALSE(std::filesystem::exists(out + "/checkpoint.dqt"));
    const CommandResult skipped = run_dqt(args + " --overwrite --on-nonfinite skip");
    EXPECT_EQ(skipped.exit_code, 0) << skipped.output;
    const std::string metrics = read_bytes(out + "/metrics.jsonl");
    EXPECT_NE(metrics.find("\"step\":4,\"type\":\"skipped\""), std::string::npos) << metrics;
    // Its checkpoint reads back (a skipped step's NaN norm once went into it as JSON null).
    const CommandResult after_skips = run_dqt("eval " + out + "/checkpoint.dqt --eval-tokens 1024");
    EXPECT_EQ(after_skips.exit_code, 0) << after_skips.output;
    expect_one_line_error(run_dqt(tiny_train_args(out) + " --on-nonfinite ignore"), "unknown --on-nonfinite 'ignore'");
}

// The evaluations need one window of the validation split: a run that cannot have one is
// refused before its first step, not after its last (where it once lost the whole run).
TEST(Cli, AValidationSplitShorterThanOneWindowIsRefusedBeforeTraining) {
    TempDir root("cli-short-val");
    write_tiny_corpus(root / "corpus", 20);
    write_bytes(root / "val.txt", "hello there");
    ASSERT_EQ(run_dqt("data --corpus " + (root / "corpus") + " --val-corpus " + (root / "val.txt") + " --out " +
                      (root / "data"))
                  .exit_code,
              0);
    const std::string out = root / "run";
    const std::string args = "train --data " + (root / "data") + " --out " + out +
                             " --dim 32 --layers 2 --heads 2 --ffn 64 --seq-len 32 --batch 4 --steps 3 --no-sample --quiet";
    expect_one_line_error(run_dqt(args), "is shorter than one evaluation window of 32 + 1 tokens");
    expect_one_line_error(run_dqt(tiny_train_args(out) + " --steps 3 --eval-tokens 16"),
                          "--eval-tokens 16 is less than one evaluation window of 32 tokens");
    EXPECT_FALSE(std::filesystem::exists(out + "/config.json"));
}

TEST(Cli, MethodFlagsAreCheckedBeforeAnythingIsWritten) {
    TempDir root("cli-method");
    const std::string out = root / "run";
    expect_one_line_error(run_dqt(tiny_train_args(out) + " --method int4"), "unknown method 'int4'");
    expect_one_line_error(run_dqt(tiny_train_args(out) + " --method dqt --bits 9"), "--bits 9 is not supported");
    expect_one_line_error(run_dqt(tiny_train_args(out) + " --bits 4"), "--bits applies to --method dqt only");
    expect_one_line_error(run_dqt(tiny_train_args(out) + " --method bitnet --dqt-scale learned"),
                          "--dqt-scale applies to --method dqt only");
    expect_one_line_error(run_dqt(tiny_train_args(out) + " --method dqt --dqt-scale fitted"),
                          "unknown scale rule 'fitted'");
    expect_one_line_error(run_dqt(tiny_train_args(out) + " --method dqt --dqt-recipe paper"),
                          "unknown dqt recipe 'paper'");
    expect_one_line_error(run_dqt(tiny_train_args(out) + " --method bitnet --dqt-recipe reference"),
                          "--dqt-recipe applies to --method dqt only");
    expect_one_line_error(run_dqt(tiny_train_args(out) + " --method dqt --dqt-residual-bits 0 --dqt-overhang 2"),
                          "--dqt-overhang needs --dqt-residual-bits");
    expect_one_line_error(run_dqt(tiny_train_args(out) + " --method dqt --dqt-overhang 2"),
                          "--dqt-overhang 2 with --dqt-residual-bits 6 does not fit");
    expect_one_line_error(run_dqt(tiny_train_args(out) + " --method dqt --dqt-residual-bits 6 --dqt-overhang 2"),
                          "does not fit the residual's byte");
    expect_one_line_error(run_dqt(tiny_train_args(out) + " --method bitnet --dqt-overhang 1"),
                          "--dqt-overhang applies to --method dqt only");
    expect_one_line_error(run_dqt(tiny_train_args(out) + " --quantize-head"), "need --method bitnet or dqt");
    expect_one_line_error(run_dqt(tiny_train_args(out) + " --method bitnet --quantize-embedding"),
                          "--quantize-embedding needs --method dqt");
    expect_one_line_error(run_dqt(tiny_train_args(out) + " --compute-dtype fp8"), "unknown compute dtype 'fp8'");
    expect_one_line_error(run_dqt(tiny_train_args(out) + " --optim-state 4"), "--optim-state 4 is not supported");
    expect_one_line_error(run_dqt(tiny_train_args(out) + " --fused-update --grad-accum 2"),
                          "--fused-update needs --grad-accum 1");
    expect_one_line_error(run_dqt(tiny_train_args(out) + " --method dqt --quantize-head"),
                          "the head is tied to the embedding (the default)");
    expect_one_line_error(run_dqt(tiny_train_args(out) + " --method dqt --quantize-head --tie-embeddings"),
                          "the head is tied to the embedding");
    expect_one_line_error(run_dqt(tiny_train_args(out) + " --method bitnet --quantize-head"),
                          "which bitnet keeps in fp32: add --untie-embeddings");
    expect_one_line_error(run_dqt(tiny_train_args(out) + " --compress-gradients 3"), "--compress-gradients: 3 not in {8,4}");
    expect_one_line_error(run_dqt(tiny_train_args(out) + " --compress-weights 16"), "--compress-weights: 16 not in {8,4}");
    expect_one_line_error(run_dqt(tiny_train_args(out) + " --compress-gradients 4 --fused-update"),
                          "--fused-update runs on one rank: drop one of them");
    EXPECT_FALSE(std::filesystem::exists(out + "/checkpoint.dqt"));
}

// Files that pass their checksums but hold what dqt cannot run: one line each, from every command
// that reads them.
TEST(Cli, UnknownMethodsAndTensorTypesInValidFilesAreOneLineErrors) {
    TempDir root("cli-unknown");
    const std::string run = root / "run";
    ASSERT_EQ(run_dqt(tiny_train_args(run) + " --method dqt --tie-embeddings --steps 2 --no-sample").exit_code, 0);
    const std::string checkpoint = run + "/checkpoint.dqt";
    const std::string int4 = root / "int4.dqt";
    copy_checkpoint_with_meta(checkpoint, int4, [](nlohmann::json& meta) { meta["options"]["method"]["method"] = "int4"; });
    for (const std::string command : {"eval ", "generate ", "export "}) {
        expect_one_line_error(run_dqt(command + int4), "unknown method 'int4'");
    }
    // A crafted context: a seq_len of 2^30 would size caches of billions of positions.
    const std::string long_context = root / "long.dqt";
    copy_checkpoint_with_meta(checkpoint, long_context,
                              [](nlohmann::json& meta) { meta["options"]["model"]["seq_len"] = 1 << 30; });
    expect_one_line_error(run_dqt("generate " + long_context), "seq_len must be at most 1048576");

    // A GGUF tensor of a type dqt does not read (Q4_1 = 3) in place of the embedding's F32. The
    // file's own checksum key is renamed, so it reads as another tool's file, unchecked.
    ASSERT_EQ(run_dqt("export " + checkpoint).exit_code, 0);
    std::string gguf = read_bytes(run + "/model.gguf");
    const size_t key_at = gguf.find("dqt.file_crc32");
    ASSERT_NE(key_at, std::string::npos);
    gguf[key_at + 4] = 'x';
    const std::string name = "token_embd.weight";
    const size_t name_at = gguf.find(name);
    ASSERT_NE(name_at, std::string::npos);
    const size_t type_at = name_at + name.size() + 4 + 2 * 8;  // name, n_dims, two i64 dims
    ASSERT_EQ(gguf[type_at], 0) << "the embedding is not F32 (type 0)";
    gguf[type_at] = 3;
    write_bytes(root / "q4_1.gguf", gguf);
    for (const std::string command : {"eval ", "generate "}) {
        expect_one_line_error(run_dqt(command + (root / "q4_1.gguf")), "type 3");
    }
}

// --method dqt trains with the tuned recipe unless told otherwise; a flag given explicitly wins
// over its recipe, and the run's config.json holds what was used.
TEST(Cli, DqtRunsStartFromTheirRecipe) {
    TempDir root("cli-recipe");
    const auto trained_config = [&](const std::string& name, const std::string& flags) {
        const std::string out = root / name;
        const CommandResult result = run_dqt(tiny_train_args(out) + " --steps 2 --no-sample " + flags);
        EXPECT_EQ(result.exit_code, 0) << result.output;
        return nlohmann::json::parse(read_bytes(out + "/config.json"));
    };
    const nlohmann::json tuned = trained_config("tuned", "--method dqt");
    EXPECT_EQ(tuned.at("method").at("scale_rule"), "learned");
    EXPECT_EQ(tuned.at("method").at("residual_bits"), 6);
    EXPECT_EQ(tuned.at("method").at("residual_overhang"), 1);
    EXPECT_FLOAT_EQ(tuned.at("beta1").get<float>(), 0.9f);
    EXPECT_FLOAT_EQ(tuned.at("lr").get<float>(), 3e-3f);
    EXPECT_FLOAT_EQ(tuned.at("min_lr_ratio").get<float>(), 0.0f);

    const nlohmann::json reference = trained_config("reference", "--method dqt --dqt-recipe reference");
    EXPECT_EQ(reference.at("method").at("scale_rule"), "reference");
    EXPECT_EQ(reference.at("method").at("residual_bits"), 0);
    EXPECT_FLOAT_EQ(reference.at("beta1").get<float>(), 0.9f);
    EXPECT_FLOAT_EQ(reference.at("lr").get<float>(), 2e-3f);
    EXPECT_FLOAT_EQ(reference.at("min_lr_ratio").get<float>(), 0.1f);

    const nlohmann::json mixed = trained_config("mixed", "--method dqt --lr 0.01 --dqt-scale reference");
    EXPECT_EQ(mixed.at("method").at("scale_rule"), "reference");
    EXPECT_FLOAT_EQ(mixed.at("lr").get<float>(), 0.01f);
    EXPECT_FLOAT_EQ(mixed.at("min_lr_ratio").get<float>(), 0.0f);
    EXPECT_EQ(mixed.at("method").at("residual_bits"), 6);
    EXPECT_EQ(mixed.at("method").at("residual_overhang"), 1);

    const nlohmann::json lean = trained_config("lean", "--method dqt --dqt-residual-bits 0");
    EXPECT_EQ(lean.at("method").at("residual_bits"), 0);
    EXPECT_EQ(lean.at("method").at("scale_rule"), "learned");
    const nlohmann::json overhang = trained_config("overhang", "--method dqt --dqt-residual-bits 6 --dqt-overhang 1");
    EXPECT_EQ(overhang.at("method").at("residual_bits"), 6);
    EXPECT_EQ(overhang.at("method").at("residual_overhang"), 1);
    const nlohmann::json byte = trained_config("byte", "--method dqt --dqt-residual-bits 8");
    EXPECT_EQ(byte.at("method").at("residual_bits"), 8);
    EXPECT_FALSE(byte.at("method").contains("residual_overhang"));
    const nlohmann::json eight = trained_config("eight", "--method dqt --bits 8");
    EXPECT_EQ(eight.at("method").at("residual_bits"), 0);

    const nlohmann::json fp = trained_config("fp", "--method fp");
    EXPECT_EQ(fp.at("method").at("scale_rule"), "reference");
    EXPECT_FLOAT_EQ(fp.at("beta1").get<float>(), 0.9f);
    EXPECT_FLOAT_EQ(fp.at("lr").get<float>(), 2e-3f);
}

// A dqt 8-bit run evaluates with its own weights and with ternary ones; an fp checkpoint has
// nothing to convert.
TEST(Cli, EvalTernaryReportsBothLosses) {
    TempDir root("cli-ternary");
    const std::string dqt_run = root / "dqt8", fp_run = root / "fp";
    ASSERT_EQ(run_dqt(tiny_train_args(dqt_run) + " --method dqt --bits 8 --steps 3 --no-sample").exit_code, 0);
    const CommandResult eval = run_dqt("eval " + dqt_run + "/checkpoint.dqt --ternary --eval-tokens 1024");
    EXPECT_EQ(eval.exit_code, 0) << eval.output;
    EXPECT_NE(eval.output.find("dqt-8"), std::string::npos) << eval.output;
    EXPECT_NE(eval.output.find("with ternary weights"), std::string::npos) << eval.output;
    ASSERT_EQ(run_dqt(tiny_train_args(fp_run) + " --steps 3 --no-sample").exit_code, 0);
    expect_one_line_error(run_dqt("eval " + fp_run + "/checkpoint.dqt --ternary"), "needs a bitnet or dqt checkpoint");
}

// The memory benchmark runs every case in a child process and tabulates them; a tiny model
// keeps it fast here (the real run uses the paper's 130M model).
TEST(Cli, BenchMemoryTabulatesEveryCase) {
    TempDir root("cli-bench-memory");
    write_bytes(root / "tiny.json",
                "{\"dim\": 32, \"n_layers\": 1, \"n_heads\": 2, \"ffn_dim\": 64, \"seq_len\": 16, "
                "\"vocab_size\": 300}");
    const CommandResult result = run_dqt("bench memory --steps 1 --threads 1 --config " + (root / "tiny.json"));
    ASSERT_EQ(result.exit_code, 0) << result.output;
    for (const char* row : {"| fp, fp32 AdamW |", "| bitnet, fp32 AdamW |", "| dqt ternary, 8-bit state, fused updates |",
                            "| dqt ternary, 8-bit state, fused updates, 8-bit residual |"}) {
        EXPECT_NE(result.output.find(row), std::string::npos) << row << " missing from:\n" << result.output;
    }
    expect_one_line_error(run_dqt("bench memory --case nope --config " + (root / "tiny.json")),
                          "unknown memory case 'nope'");
    // Refused before any case allocates: the parent checks them all (a child's error was two
    // lines), and `bench train` as `train` does (it was killed by the OOM killer at 24 GB).
    expect_one_line_error(run_dqt("bench memory --seq-len 100000 --batch 8 --config " + (root / "tiny.json")),
                          "Adam state and activations, more than this machine's");
    expect_one_line_error(run_dqt("bench train --seq-len 200000"), "Adam state and activations, more than this machine's");
}

// The bandwidth benchmark reads back each size asked for and the buffer beyond the cache (4x the
// last-level cache, at least 512 MiB); sizes the machine cannot hold fail with one line.
TEST(Cli, BenchBandwidthReadsBackEachSize) {
    const CommandResult result = run_dqt("bench bandwidth --mib 1 3 --passes 1 --threads 1 --json");
    ASSERT_EQ(result.exit_code, 0) << result.output;
    const nlohmann::json record = nlohmann::json::parse(result.output);
    const uint64_t cache = record["last_level_cache_bytes"].get<uint64_t>();
    EXPECT_GE(record["beyond_cache_buffer_bytes"].get<uint64_t>(), std::max<uint64_t>(4 * cache, 512ull << 20));
    EXPECT_GT(record["beyond_cache_gb_per_s"].get<double>(), 0.0);
    ASSERT_EQ(record["sizes"].size(), 2u);
    EXPECT_EQ(record["sizes"][0]["mib"], 1);
    EXPECT_EQ(record["sizes"][1]["mib"], 3);
    for (const auto& size : record["sizes"]) {
        EXPECT_TRUE(std::isfinite(size["gb_per_s"].get<double>()) && size["gb_per_s"].get<double>() > 0.0) << size;
        const double ratio = size["gb_per_s"].get<double>() / record["beyond_cache_gb_per_s"].get<double>();
        EXPECT_NEAR(size["over_beyond_cache"].get<double>(), ratio, 1e-9 * ratio);
    }
    expect_one_line_error(run_dqt("bench bandwidth --mib 0"), "--mib");
    expect_one_line_error(run_dqt("bench bandwidth --mib 100000000"), "more than half this machine's memory");
}

// The serving benchmark times each stream count asked for through the engine, with the KV
// cache asked for; bad flags fail with one line.
TEST(Cli, BenchServeTimesEachStreamCount) {
    const std::string tiny = "--dim 256 --layers 2 --heads 4 --ffn 256 --seq-len 160 --threads 1 ";
    const CommandResult result = run_dqt("bench serve " + tiny +
                                         "--streams 1 2 --prompt-tokens 16 --decode-tokens 128 --repeats 3 --kv-cache f16 --json");
    ASSERT_EQ(result.exit_code, 0) << result.output;
    const nlohmann::json record = nlohmann::json::parse(result.output);
    EXPECT_EQ(record.at("kv_cache"), "f16");
    // The layout serve would hold with --parallel 2: auto timed one row and two (where the CPU
    // has the lookup kernels; it names what it held either way).
    EXPECT_EQ(record.at("ternary_layout"), "auto");
    if (record.contains("layout_decode_step_seconds")) {
        const nlohmann::json& timed = record["layout_decode_step_seconds"];
        ASSERT_EQ(timed.size(), 2u) << timed;
        EXPECT_EQ(timed[0].at("rows"), 1);
        EXPECT_EQ(timed[1].at("rows"), 2);
    }
    // Three runs: one whose prompt run a busy machine stalls is dropped (bench serve's rule).
    const CommandResult two_bit = run_dqt("bench serve " + tiny +
                                          "--streams 2 --decode-tokens 128 --repeats 3 --ternary-layout 2bit --json");
    ASSERT_EQ(two_bit.exit_code, 0) << two_bit.output;
    const nlohmann::json two_bit_record = nlohmann::json::parse(two_bit.output);
    EXPECT_FALSE(two_bit_record.contains("layout_decode_step_seconds"));
    EXPECT_EQ(two_bit_record.at("kernels").get<std::string>().find("lookup"), std::string::npos) << two_bit_record;
    ASSERT_EQ(record.at("runs").size(), 2u);
    for (int i = 0; i < 2; ++i) {
        const nlohmann::json& run = record["runs"][static_cast<size_t>(i)];
        EXPECT_EQ(run.at("streams"), i + 1);
        const double rate = run.at("decode_tokens_per_second").get<double>();
        // Positive, and below a token every 0.1 us, which no decode step of even this model reaches.
        EXPECT_TRUE(rate > 0.0 && rate < 1e7) << run;
        EXPECT_DOUBLE_EQ(run.at("per_stream_tokens_per_second").get<double>(), rate / (i + 1));
    }
    EXPECT_DOUBLE_EQ(record["runs"][1].at("speedup_over_one_stream").get<double>(),
                     record["runs"][1].at("decode_tokens_per_second").get<double>() /
                         record["runs"][0].at("decode_tokens_per_second").get<double>());
    expect_one_line_error(run_dqt("bench serve " + tiny + "--kv-cache f8"), "--kv-cache");
    expect_one_line_error(run_dqt("bench serve " + tiny + "--ternary-layout 3bit"), "--ternary-layout");
    expect_one_line_error(run_dqt("bench serve " + tiny + "--prompt-tokens 200 --decode-tokens 2 --repeats 1"),
                          "exceed the model's context");
}

// Export a tied ternary run to GGUF, then evaluate and generate from the file; bad requests
// fail with one line and write nothing.
TEST(Cli, ExportWritesAGgufThatEvalAndGenerateRead) {
    TempDir root("cli-export");
    const std::string run = root / "tied", untied = root / "untied";
    ASSERT_EQ(run_dqt(tiny_train_args(run) + " --method dqt --tie-embeddings --steps 3 --no-sample").exit_code, 0);
    const CommandResult exported = run_dqt("export " + run + "/checkpoint.dqt --ternary-type tq1_0");
    ASSERT_EQ(exported.exit_code, 0) << exported.output;
    EXPECT_NE(exported.output.find("architecture 'bitnet'"), std::string::npos) << exported.output;
    const std::string gguf = run + "/model.gguf";
    const CommandResult from_checkpoint = run_dqt("eval " + run + "/checkpoint.dqt --eval-tokens 1024 --json");
    const CommandResult from_gguf = run_dqt("eval " + gguf + " --eval-tokens 1024 --json");
    ASSERT_EQ(from_gguf.exit_code, 0) << from_gguf.output;
    const auto loss = [](const std::string& json) { return nlohmann::json::parse(json).at("val_loss").get<double>(); };
    EXPECT_NEAR(loss(from_gguf.output), loss(from_checkpoint.output), 1e-4);
    const CommandResult generated = run_dqt("generate " + gguf + " --tokens 5 --temperature 0");
    EXPECT_EQ(generated.exit_code, 0) << generated.output;
    EXPECT_NE(generated.output.find("kernels: ternary"), std::string::npos) << generated.output;
    // --tokens 0 prints the prompt alone (it was refused: "the context holds 22" for a 32-token model).
    const CommandResult prompt_only = run_dqt("generate " + gguf + " --tokens 0 --prompt abc");
    EXPECT_EQ(prompt_only.exit_code, 0) << prompt_only.output;
    EXPECT_NE(prompt_only.output.find("3 prompt tokens, 0 generated"), std::string::npos) << prompt_only.output;
    // One new token comes from the prompt's logits: no decode pass ran, so no speed is claimed.
    const CommandResult one_token = run_dqt("generate " + gguf + " --tokens 1 --prompt abc");
    EXPECT_EQ(one_token.exit_code, 0) << one_token.output;
    EXPECT_NE(one_token.output.find("3 prompt tokens, 1 generated (kernels"), std::string::npos) << one_token.output;
    EXPECT_NE(generated.output.find("5 generated at "), std::string::npos) << generated.output;

    expect_one_line_error(run_dqt("export " + run + "/checkpoint.dqt --format onnx"), "unknown --format 'onnx'");
    // Export never overwrites its input (it did: a GGUF replaced the training checkpoint).
    const std::string checkpoint_bytes = read_bytes(run + "/checkpoint.dqt");
    expect_one_line_error(run_dqt("export " + run + "/checkpoint.dqt --out " + run + "/checkpoint.dqt"),
                          "is the input file itself");
    expect_one_line_error(run_dqt("export " + gguf + " --out " + run + "/./model.gguf"), "is the input file itself");
    EXPECT_EQ(read_bytes(run + "/checkpoint.dqt"), checkpoint_bytes);
    std::filesystem::create_directories(root / "a-folder");
    expect_one_line_error(run_dqt("export " + run + "/checkpoint.dqt --out " + (root / "a-folder")),
                          "a-folder: it is a directory: give a file name inside it");
    expect_one_line_error(run_dqt("export " + run + "/checkpoint.dqt --ternary-type tq3_0"),
                          "unknown --ternary-type 'tq3_0'");
    ASSERT_EQ(run_dqt(tiny_train_args(untied) + " --method dqt --untie-embeddings --steps 3 --no-sample").exit_code, 0);
    expect_one_line_error(run_dqt("export " + untied + "/checkpoint.dqt"), "trained with --untie-embeddings");
    EXPECT_FALSE(std::filesystem::exists(untied + "/model.gguf"));
    write_bytes(root / "fake.gguf", "GGUF\x03\x00\x00\x00");
    expect_one_line_error(run_dqt("eval " + (root / "fake.gguf")), "truncated");
}

// The generation benchmark runs end to end on a tiny model, against llama.cpp too, which loads
// its synthetic 1,000-entry byte-level vocabulary.
TEST(Cli, BenchGenerateComparesWithLlamaCpp) {
    const CommandResult result = run_dqt(
        "bench generate --dim 256 --layers 1 --heads 4 --ffn 256 --seq-len 64 --vocab-size 1000 --prompt-tokens 16 "
        "--decode-tokens 8 --repeats 1 --json");
    ASSERT_EQ(result.exit_code, 0) << result.output;
    const nlohmann::json record = nlohmann::json::parse(result.output);
    EXPECT_GT(record.at("dqt").at("decode_tokens_per_second").get<double>(), 0.0);
    EXPECT_GT(record.at("llama_cpp").at("decode_tokens_per_second").get<double>(), 0.0);
    EXPECT_GT(record.at("read_bandwidth_gb_per_s").get<double>(), 0.0);
    // The bandwidth buffer is at least 4x the last-level cache; a 0.5M-parameter model's bytes fit
    // in any such cache, so its decode is reported as cache-resident, with no memory-bound fraction,
    // whether the cache's size was read (sysfs) or the bytes were seen to read back from a cache.
    const uint64_t cache = record.at("last_level_cache_bytes").get<uint64_t>();
    EXPECT_GE(record.at("bandwidth_buffer_bytes").get<uint64_t>(), 4 * cache);
    const nlohmann::json& dqt = record.at("dqt");
    // 1 layer x (K, V) x kv_dim 256 x 4 bytes x the mean positions read, 16 + (8 + 1) / 2.
    EXPECT_EQ(dqt.at("kv_bytes_per_token").get<double>(), 1 * 2 * 256 * 4 * 20.5);
    EXPECT_EQ(dqt.at("regime"), "cache-resident") << record.dump();
    EXPECT_TRUE(dqt.at("decode_fraction_of_bandwidth_bound").is_null());
    if (cache == 0) {
        EXPECT_GT(dqt.at("read_gb_per_s_at_token_size").get<double>(), 1.5 * record.at("read_bandwidth_gb_per_s").get<double>());
    }
    EXPECT_GT(dqt.at("decode_read_gb_per_s").get<double>(), 0.0);
    expect_one_line_error(run_dqt("bench generate --dim 256 --layers 1 --heads 4 --ffn 256 --seq-len 16 "
                                  "--prompt-tokens 16 --decode-tokens 8 --no-llama-cpp"),
                          "exceed the model's context");
}

// --keep keeps the random model's GGUF file for other engines to time, and --preset 2b gives
// BitNet b1.58 2B4T's block shape and vocabulary size (here shrunk by shape flags, which
// override it; the vocabulary is its own, 128,256 entries).
TEST(Cli, BenchGenerateKeepsItsModelAndKnowsThe2BShape) {
    TempDir root("cli-bench-keep");
    const std::string tiny = "--dim 160 --layers 1 --ffn 256 --seq-len 64 --prompt-tokens 4 --decode-tokens 2 "
                             "--repeats 1 --no-llama-cpp --json";
    const CommandResult kept = run_dqt("bench generate --preset 2b " + tiny + " --float-type f16 --keep " + (root / "kept"));
    ASSERT_EQ(kept.exit_code, 0) << kept.output;
    const nlohmann::json record = nlohmann::json::parse(kept.output);
    ModelConfig shape;  // 2b's heads (20) and kv heads (5), the flags' sizes
    shape.dim = 160;
    shape.n_layers = 1;
    shape.n_heads = 20;
    shape.n_kv_heads = 5;
    shape.ffn_dim = 256;
    shape.vocab_size = 128256;
    shape.tie_embeddings = true;
    EXPECT_EQ(record.at("parameters").get<int64_t>(), shape.parameter_count());
    ASSERT_TRUE(std::filesystem::exists(root / "kept/model.gguf"));
    const CommandResult generated = run_dqt("generate " + (root / "kept/model.gguf") + " --prompt ab --tokens 3");
    EXPECT_EQ(generated.exit_code, 0) << generated.output;
    // --float-type f16: the tied embedding is F16 in the file, and dqt holds it in fp16 too.
    const InferenceModel model(*import_gguf(root / "kept/model.gguf").model);
    EXPECT_EQ(model.head.format, LinearFormat::half);
    expect_one_line_error(run_dqt("bench generate " + (root / "kept/model.gguf") + " --float-type f16 --no-llama-cpp"),
                          "--float-type");
    // An int8 KV cache: a byte an entry and a 4-byte scale per kv head, over head_dim 8 x 5 kv
    // heads x (K, V), at the mean positions read, 4 + (2 + 1) / 2. llama.cpp has no such cache.
    const CommandResult int8_cache = run_dqt("bench generate " + (root / "kept/model.gguf") + " --kv-cache int8 " +
                                             "--prompt-tokens 4 --decode-tokens 2 --repeats 1 --no-llama-cpp --json");
    ASSERT_EQ(int8_cache.exit_code, 0) << int8_cache.output;
    EXPECT_EQ(nlohmann::json::parse(int8_cache.output).at("dqt").at("kv_bytes_per_token").get<double>(),
              2 * (5 * 8 * 1 + 5 * 4) * 5.5);
    expect_one_line_error(run_dqt("bench generate " + (root / "kept/model.gguf") + " --kv-cache int8"),
                          "add --no-llama-cpp");
    expect_one_line_error(run_dqt("bench generate " + tiny + " --keep " + (root / "kept")), "exists");
    expect_one_line_error(run_dqt("bench generate --preset 7b " + tiny), "unknown --preset '7b': use 154m or 2b");
    expect_one_line_error(run_dqt("bench generate " + (root / "kept/model.gguf") + " --keep " + (root / "k2")), "--keep");
}

// --ffn-act relu2 (BitNet b1.58 2B4T's gated FFN) trains, is kept in the run's config, serves
// generation, and is refused by export, whose llama.cpp graphs gate with SiLU.
TEST(Cli, AReluSquaredFfnTrainsAndGeneratesButDoesNotExport) {
    TempDir root("cli-relu2");
    const std::string out = root / "run";
    const CommandResult trained = run_dqt(tiny_train_args(out) + " --method dqt --ffn-act relu2 --steps 3 --no-sample");
    ASSERT_EQ(trained.exit_code, 0) << trained.output;
    std::ifstream config_file(out + "/config.json");
    const nlohmann::json config = nlohmann::json::parse(config_file);
    EXPECT_EQ(config["model"]["ffn_activation"], "relu2") << config.dump();
    const CommandResult generated = run_dqt("generate " + out + "/checkpoint.dqt --prompt Our --tokens 5");
    EXPECT_EQ(generated.exit_code, 0) << generated.output;
    expect_one_line_error(run_dqt("export " + out + "/checkpoint.dqt --out " + (root / "m.gguf")), "ReLU^2-GLU");
    EXPECT_FALSE(std::filesystem::exists(root / "m.gguf"));
    expect_one_line_error(run_dqt(tiny_train_args(root / "bad") + " --ffn-act gelu"), "--ffn-act");
}

// --init-from: an 8-bit dqt run carried into ternary dqt starts from the 8-bit model's TWN
// ternary weights (after one step at a vanishing lr its loss is the one `eval --ternary` gives
// for the TWN rule); the run records where it started, and shape flags and --resume are refused.
TEST(Cli, InitFromCarriesATrainedModelIntoAnotherMethod) {
    TempDir root("cli-init-from");
    const std::string eight = root / "eight";
    ASSERT_EQ(run_dqt(tiny_train_args(eight) + " --method dqt --bits 8 --steps 20 --no-sample").exit_code, 0);
    const std::string source = eight + "/checkpoint.dqt";
    const CommandResult converted = run_dqt("eval " + source + " --ternary --json --eval-tokens 1024");
    ASSERT_EQ(converted.exit_code, 0) << converted.output;
    const double twn_loss = nlohmann::json::parse(converted.output).at("ternary_twn_val_loss").get<double>();

    const std::string ternary = root / "ternary";
    const std::string args = "train --data " + tiny_dataset_dir() + " --out " + ternary + " --init-from " + source +
                             " --method dqt --bits 1.58 --seq-len 32 --batch 4 --eval-tokens 1024 --quiet --no-sample";
    const CommandResult started = run_dqt(args + " --steps 1 --lr 1e-12");
    ASSERT_EQ(started.exit_code, 0) << started.output;
    const CommandResult evaluated = run_dqt("eval " + ternary + "/checkpoint.dqt --json --eval-tokens 1024");
    ASSERT_EQ(evaluated.exit_code, 0) << evaluated.output;
    EXPECT_NEAR(nlohmann::json::parse(evaluated.output).at("val_loss").get<double>(), twn_loss, 1e-4);
    const nlohmann::json config = nlohmann::json::parse(read_bytes(ternary + "/config.json"));
    EXPECT_EQ(config.at("init_from").get<std::string>(), source);
    EXPECT_EQ(config.at("model").at("dim").get<int>(), 32);  // the initial model's shape

    expect_one_line_error(run_dqt(args + " --overwrite --dim 64"), "--dim cannot be combined with --init-from");
    expect_one_line_error(run_dqt("train --out " + ternary + " --resume --init-from " + source),
                          "--init-from cannot be combined with --resume");
    expect_one_line_error(run_dqt(args + " --overwrite --init-from " + root / "missing.dqt"), "missing.dqt");
}

// dqt data --tokenizer-from: a corpus tokenized with a dataset's or a model's BPE tokenizer, so
// the model evaluates on it (eval refuses a dataset with another tokenizer); the tokenizer file
// is the source's, byte for byte.
TEST(Cli, DataTokenizerFromReusesAnExistingTokenizer) {
    TempDir root("cli-tokenizer-from");
    write_tiny_corpus(root / "first", 20);
    write_tiny_corpus(root / "second", 12);
    const std::string bpe = root / "first-bpe";
    ASSERT_EQ(run_dqt("data --corpus " + root / "first" + " --tokenizer bpe --vocab 300 --out " + bpe).exit_code, 0);
    const std::string run = root / "run";
    ASSERT_EQ(run_dqt("train --data " + bpe + " --out " + run +
                      " --dim 32 --layers 1 --heads 2 --ffn 64 --seq-len 32 --batch 4 --steps 2 --eval-tokens 256 "
                      "--quiet --no-sample")
                  .exit_code,
              0);
    const std::string checkpoint = run + "/checkpoint.dqt";
    for (const std::string& source : {bpe, checkpoint}) {
        const std::string out = root / ("second-from-" + std::filesystem::path(source).filename().string());
        const CommandResult made = run_dqt("data --corpus " + root / "second" + " --tokenizer-from " + source +
                                           " --out " + out);
        ASSERT_EQ(made.exit_code, 0) << made.output;
        EXPECT_NE(made.output.find("the bpe tokenizer of " + source + ", 300 tokens"), std::string::npos) << made.output;
        EXPECT_EQ(read_bytes(out + "/tokenizer.bin"), read_bytes(bpe + "/tokenizer.bin"));
        const CommandResult evaluated = run_dqt("eval " + checkpoint + " --data " + out + " --eval-tokens 256");
        EXPECT_EQ(evaluated.exit_code, 0) << evaluated.output;
    }
    const std::string byte_data = root / "second-byte";
    ASSERT_EQ(run_dqt("data --corpus " + root / "second" + " --out " + byte_data).exit_code, 0);
    expect_one_line_error(run_dqt("eval " + checkpoint + " --data " + byte_data + " --eval-tokens 256"),
                          "different tokenizer");
    expect_one_line_error(run_dqt("data --corpus " + root / "second" + " --tokenizer-from " + bpe),
                          "--tokenizer-from needs --out");
    expect_one_line_error(run_dqt("data --corpus " + root / "second" + " --tokenizer-from " + bpe +
                                  " --vocab 400 --out " + root / "x"),
                          "--vocab excludes --tokenizer-from");
    expect_one_line_error(run_dqt("data --corpus " + root / "second" + " --tokenizer-from " + root / "second" +
                                  " --out " + root / "y"),
                          "without tokenizer.bin");
}
