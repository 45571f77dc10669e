// Hugging Face tokenizer.json byte-level BPE (data/byte_level_bpe.h) against tokenizers.js:
// scripts/make_tokenizer_json_fixture.py trained a 600-merge BPE, wrote it in LLaMA 3's layout
// (Split regex, ByteLevel, ignore_merges, added tokens) and GPT-2's (ByteLevel with its own
// regex, merges as pairs), and recorded tokenizers.js's ids of a dozen probe texts
// (contractions in any case, digit runs, whitespace runs, six scripts, emoji, added tokens in
// the text and near misses of them). dqt must give the same ids. On LLaMA 3's own
// tokenizer.json the two give identical ids on whole corpora (docs/FORMATS.md), which needs
// files not committed here.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "data/byte_level_bpe.h"
#include "data/synthetic_bpe.h"
#include "data/tokenizer.h"
#include "export/hf_import.h"
#include "test_helpers.h"

using namespace dqt;
using dqt::testing::TempDir;

namespace {

const std::string kGolden = std::string(DQT_SOURCE_DIR) + "/tests/golden/tokenizer_json/";

std::string fixture(const std::string& style) { return dqt::testing::read_bytes(kGolden + style + "_style.json"); }

void expect_refused(const std::string& text, const std::string& needle) {
    try {
        load_byte_level_bpe(text, "tokenizer.json");
        ADD_FAILURE() << "no error for " << needle;
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
        EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
    }
}

}  // namespace

TEST(ByteLevelBpe, GivesTheIdsOfTokenizersJs) {
    const nlohmann::json expected = nlohmann::json::parse(dqt::testing::read_bytes(kGolden + "expected.json"));
    const std::vector<std::string> texts = expected.at("texts").get<std::vector<std::string>>();
    for (const std::string style : {"llama3", "gpt2"}) {
        SCOPED_TRACE(style);
        const std::unique_ptr<Tokenizer> tokenizer = load_byte_level_bpe(fixture(style), style);
        EXPECT_EQ(tokenizer->vocab_size(), 858);  // 256 bytes, 600 merges, 2 added tokens
        EXPECT_EQ(tokenizer->kind(), "byte-level-bpe");
        size_t merged = 0;
        for (size_t i = 0; i < texts.size(); ++i) {
            const std::vector<int32_t> ids = tokenizer->encode(texts[i]);
            EXPECT_EQ(ids, expected.at(style).at(i).get<std::vector<int32_t>>()) << texts[i];
            EXPECT_EQ(tokenizer->decode(ids), texts[i]);
            merged += texts[i].size() - ids.size();
        }
        EXPECT_GT(merged, 200u);  // the merges are used, not only byte tokens
    }
}

// Any bytes, invalid UTF-8 included, go through and come back; the checkpoint's round trip
// (kind + serialize) gives the same tokenizer.
TEST(ByteLevelBpe, AnyBytesRoundTripAndTheStoredFormReloads) {
    const uint64_t seed = dqt::testing::test_seed();
    SCOPED_TRACE(dqt::testing::seed_trace(seed));
    const std::unique_ptr<Tokenizer> tokenizer = load_byte_level_bpe(fixture("llama3"), "llama3");
    std::mt19937_64 rng(seed);
    for (int trial = 0; trial < 200; ++trial) {
        std::string text(rng() % 64, '\0');
        for (char& c : text) c = static_cast<char>(rng() % 4 == 0 ? rng() % 256 : "ab \n'<|>\xc3\xa9"[rng() % 10]);
        const std::vector<int32_t> ids = tokenizer->encode(text);
        ASSERT_EQ(tokenizer->decode(ids), text);
    }
    const std::unique_ptr<Tokenizer> reloaded = load_tokenizer(tokenizer->kind(), tokenizer->serialize());
    EXPECT_TRUE(same_tokenizer(*tokenizer, *reloaded));
    EXPECT_EQ(reloaded->encode("The union shall endure."), tokenizer->encode("The union shall endure."));
    EXPECT_THROW(tokenizer->decode(std::vector<int32_t>{858}), Error);
}

// A Hugging Face folder with a tokenizer.json of merges is read as this tokenizer.
TEST(ByteLevelBpe, AHuggingFaceFolderReadsIt) {
    TempDir root("bpe-json-folder");
    const std::string folder = root / "model";
    std::filesystem::create_directory(folder);
    std::ofstream(folder + "/tokenizer.json") << fixture("llama3");
    std::ofstream(folder + "/config.json") << R"({"vocab_size": 858})";
    EXPECT_EQ(import_hf_tokenizer(folder)->kind(), "byte-level-bpe");
    std::ofstream(folder + "/config.json") << R"({"vocab_size": 900})";
    EXPECT_THROW(import_hf_tokenizer(folder), Error);
}

TEST(ByteLevelBpe, RefusesWhatItDoesNotImplementWithOneLine) {
    const nlohmann::json base = nlohmann::json::parse(fixture("llama3"));
    auto edited = [&](const std::function<void(nlohmann::json&)>& edit) {
        nlohmann::json j = base;
        edit(j);
        return j.dump();
    };
    expect_refused("{not json", "is not a JSON object");
    expect_refused(edited([](nlohmann::json& j) { j["normalizer"] = {{"type", "NFC"}}; }), "a normalizer");
    expect_refused(edited([](nlohmann::json& j) { j["model"]["type"] = "WordPiece"; }), "model type '\"WordPiece\"'");
    expect_refused(edited([](nlohmann::json& j) { j["model"]["byte_fallback"] = true; }), "byte_fallback");
    expect_refused(edited([](nlohmann::json& j) { j["model"]["merges"].push_back("zz qq"); }), "not in the vocabulary");
    expect_refused(edited([](nlohmann::json& j) { j["model"]["vocab"]["a"] = 5000; }), "leaves ids without a token");
    expect_refused(edited([](nlohmann::json& j) { j["model"]["vocab"]["\xe4\xb8\xad"] = 900; }), "not made of byte symbols");
    expect_refused(edited([](nlohmann::json& j) { j["added_tokens"][0]["lstrip"] = true; }), "sets lstrip");
    expect_refused(edited([](nlohmann::json& j) { j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "(["; }),
                   "does not compile");
    expect_refused(edited([](nlohmann::json& j) { j["pre_tokenizer"] = {{"type", "Whitespace"}}; }), "is not supported");
    expect_refused(edited([](nlohmann::json& j) { j["pre_tokenizer"]["pretokenizers"][1]["add_prefix_space"] = true; }),
                   "add_prefix_space");
}

// The synthetic vocabulary (data/synthetic_bpe.h): exactly the size asked for, pairs and
// pair-plus-byte tokens where the order says, and any bytes round-trip through it.
TEST(SyntheticByteLevelBpe, HasTheSizeAskedAndEncodesPairsAndTriplesAsOneToken) {
    for (const int size : {256, 1000, 65792, 70000}) {
        const std::unique_ptr<Tokenizer> tokenizer = make_synthetic_byte_level_bpe(size);
        EXPECT_EQ(tokenizer->vocab_size(), size);
        EXPECT_EQ(tokenizer->kind(), "byte-level-bpe");
    }
    const std::unique_ptr<Tokenizer> tokenizer = make_synthetic_byte_level_bpe(70000);
    // "ab" is pair (97, 98). Triples exist for the first (70,000 - 65,792) / 256 = 16 pairs only:
    // "\0\0\5" is pair 0 then byte 5, one token; "abc"'s triple is beyond this size, so a pair and a byte.
    EXPECT_EQ(tokenizer->encode("ab"), std::vector<int32_t>({256 + 97 * 256 + 98}));
    EXPECT_EQ(tokenizer->encode(std::string("\x00\x00\x05", 3)), std::vector<int32_t>({256 + 65536 + 5}));
    EXPECT_EQ(tokenizer->encode("abc"), std::vector<int32_t>({256 + 97 * 256 + 98, 99}));
    std::mt19937 rng(29);
    for (int trial = 0; trial < 20; ++trial) {
        std::string bytes(static_cast<size_t>(rng() % 200), '\0');
        for (char& c : bytes) c = static_cast<char>(rng() % 256);
        EXPECT_EQ(tokenizer->decode(tokenizer->encode(bytes)), bytes);
    }
    EXPECT_THROW(make_synthetic_byte_level_bpe(255), Error);
}
