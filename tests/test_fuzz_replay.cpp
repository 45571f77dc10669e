// Replays the fuzz targets' files (fuzz/reader_targets.h) in every test run: each seed in
// fuzz/seeds/<reader> (valid files the fuzzers mutate) must be accepted, and each input in
// fuzz/regressions/<reader> (one that once broke a reader, kept when its fix landed) must be
// read or refused by the contract. scripts/fuzz.sh does the fuzzing itself.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "reader_targets.h"
#include "test_helpers.h"

using namespace dqt;
using dqt::testing::read_bytes;
using dqt::testing::TempDir;
namespace fs = std::filesystem;

namespace {

std::vector<fs::path> files_in(const fs::path& folder) {
    std::vector<fs::path> files;
    if (fs::is_directory(folder)) {
        for (const fs::directory_entry& entry : fs::directory_iterator(folder)) {
            if (entry.is_regular_file()) files.push_back(entry.path());
        }
    }
    std::sort(files.begin(), files.end());
    return files;
}

std::vector<uint8_t> file_bytes(const fs::path& path) {
    const std::string bytes = read_bytes(path.string());
    return {bytes.begin(), bytes.end()};
}

const fs::path kFuzzDir = fs::path(DQT_SOURCE_DIR) / "fuzz";

TEST(FuzzReplay, EverySeedIsAcceptedByItsReader) {
    TempDir scratch("fuzz_replay");
    for (const fuzz::NamedReader& reader : fuzz::all_readers()) {
        const std::vector<fs::path> seeds = files_in(kFuzzDir / "seeds" / reader.name);
        EXPECT_FALSE(seeds.empty()) << "no seed files for the " << reader.name << " reader";
        for (const fs::path& seed : seeds) {
            const std::vector<uint8_t> bytes = file_bytes(seed);
            const fuzz::Outcome outcome = fuzz::feed(reader.reader, bytes, scratch.path.string());
            EXPECT_FALSE(outcome.defect) << seed << ": " << outcome.defect.value_or("");
            EXPECT_TRUE(outcome.accepted) << seed << " was refused: seeds must be valid files";
        }
    }
}

TEST(FuzzReplay, EveryRegressionInputKeepsTheContract) {
    TempDir scratch("fuzz_replay");
    for (const fuzz::NamedReader& reader : fuzz::all_readers()) {
        for (const fs::path& input : files_in(kFuzzDir / "regressions" / reader.name)) {
            const std::vector<uint8_t> bytes = file_bytes(input);
            const fuzz::Outcome outcome = fuzz::feed(reader.reader, bytes, scratch.path.string());
            EXPECT_FALSE(outcome.defect) << input << ": " << outcome.defect.value_or("");
        }
    }
}

// The harness's rule for error messages: one line, readable length, the file's path not counted.
TEST(FuzzReplay, TheHarnessFlagsUnreadableMessages) {
    const std::string path = "/tmp/" + std::string(2000, 'p') + "/model.gguf";
    EXPECT_FALSE(fuzz::message_defect("GGUF file " + path + " is truncated", path));
    EXPECT_TRUE(fuzz::message_defect("", path));
    EXPECT_TRUE(fuzz::message_defect("first line\nsecond line", path));
    EXPECT_TRUE(fuzz::message_defect("tensor " + std::string(600, 'x') + " is too large", path));
}

// The harness tells a file the reader accepted from one it refused.
TEST(FuzzReplay, TheHarnessTellsAcceptedFromRefused) {
    TempDir scratch("fuzz_replay");
    const std::string not_a_shard = "DQTSHARD but far too short";
    const fuzz::Outcome refused =
        fuzz::feed(fuzz::Reader::shard, {reinterpret_cast<const uint8_t*>(not_a_shard.data()), not_a_shard.size()},
                   scratch.path.string());
    EXPECT_FALSE(refused.defect) << refused.defect.value_or("");
    EXPECT_FALSE(refused.accepted);
    // A corpus of invalid UTF-8 is refused with a one-line message naming the offset.
    const std::string latin1 = "caf\xe9\n";
    const fuzz::Outcome bad_text =
        fuzz::feed(fuzz::Reader::corpus_text, {reinterpret_cast<const uint8_t*>(latin1.data()), latin1.size()},
                   scratch.path.string());
    EXPECT_FALSE(bad_text.defect) << bad_text.defect.value_or("");
    EXPECT_FALSE(bad_text.accepted);
    const std::string text = "one line\nand another\n";
    const fuzz::Outcome good_text =
        fuzz::feed(fuzz::Reader::corpus_text, {reinterpret_cast<const uint8_t*>(text.data()), text.size()}, scratch.path.string());
    EXPECT_FALSE(good_text.defect) << good_text.defect.value_or("");
    EXPECT_TRUE(good_text.accepted);
}

}  // namespace
