// Data module: corpus reading and split, tokenizers, token shards, datasets, batch sampling.
#include <gtest/gtest.h>
#include <sentencepiece_processor.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "data/batch.h"
#include "data/eval_windows.h"
#include "data/corpus.h"
#include "data/dataset.h"
#include "data/shard.h"
#include "data/tokenizer.h"
#include "core/checksum.h"
#include "test_helpers.h"

using namespace dqt;
using dqt::testing::read_bytes;
namespace fs = std::filesystem;

namespace {

// A fresh folder under /tmp, removed with everything in it at the end of the test.
struct TempDir {
    fs::path path;
    TempDir() {
        const auto* test = ::testing::UnitTest::GetInstance()->current_test_info();
        path = fs::temp_directory_path() / ("dqt_test_" + std::string(test->test_suite_name()) + "_" + test->name() +
                                            "_" + std::to_string(::getpid()));
        fs::remove_all(path);
        fs::create_directories(path);
    }
    ~TempDir() { fs::remove_all(path); }
    std::string file(const std::string& name) const { return (path / name).string(); }
};

void write_text(const std::string& path, const std::string& text) {
    fs::create_directories(fs::path(path).parent_path());
    std::ofstream(path, std::ios::binary) << text;
}

// Expects fn to throw dqt::Error whose message contains every one of parts.
void expect_error(const std::function<void()>& fn, const std::vector<std::string>& parts) {
    try {
        fn();
        ADD_FAILURE() << "expected dqt::Error containing '" << parts.front() << "'";
    } catch (const Error& e) {
        const std::string message = e.what();
        EXPECT_EQ(message.find('\n'), std::string::npos) << "error must be one line: " << message;
        for (const std::string& part : parts) {
            EXPECT_NE(message.find(part), std::string::npos) << "'" << part << "' not in: " << message;
        }
    }
}

std::string random_bytes(std::mt19937& rng, size_t n) {
    std::string bytes(n, '\0');
    for (char& c : bytes) c = static_cast<char>(rng() & 0xFF);
    return bytes;
}

// Random valid UTF-8 drawn from all planes (no surrogates).
std::string random_unicode(std::mt19937& rng, size_t characters) {
    std::string text;
    for (size_t i = 0; i < characters; ++i) {
        uint32_t cp;
        do {
            const uint32_t limits[] = {0x80, 0x800, 0x10000, 0x110000};
            cp = rng() % limits[rng() % 4];
        } while (cp >= 0xD800 && cp <= 0xDFFF);
        if (cp < 0x80) {
            text += static_cast<char>(cp);
        } else if (cp < 0x800) {
            text += static_cast<char>(0xC0 | (cp >> 6));
            text += static_cast<char>(0x80 | (cp & 0x3F));
        } else if (cp < 0x10000) {
            text += static_cast<char>(0xE0 | (cp >> 12));
            text += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
            text += static_cast<char>(0x80 | (cp & 0x3F));
        } else {
            text += static_cast<char>(0xF0 | (cp >> 18));
            text += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
            text += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
            text += static_cast<char>(0x80 | (cp & 0x3F));
        }
    }
    return text;
}

// English-like lines from a small random lexicon, with some non-ASCII words and numbers.
std::vector<std::string> generated_texts(int documents, int lines_per_document, uint32_t seed) {
    std::mt19937 rng(seed);
    const char* syllables[] = {"the",   "con",   "gress", "na",  "tion", "state", "un",   "ion", "peo",  "ple", "war",
                               "peace", "trade", "law",   "act", "gov",  "ern",   "ment", "ré",  "über", "año"};
    std::vector<std::string> words;
    for (int w = 0; w < 120; ++w) {
        std::string word;
        for (int s = 0, n = 1 + rng() % 3; s < n; ++s) word += syllables[rng() % std::size(syllables)];
        words.push_back(word);
    }
    std::vector<std::string> texts;
    for (int d = 0; d < documents; ++d) {
        std::string text;
        for (int l = 0; l < lines_per_document; ++l) {
            for (int w = 0, n = 5 + rng() % 10; w < n; ++w) {
                if (w > 0) text += ' ';
                text += words[rng() % words.size()];
                if (rng() % 10 == 0) text.append(" ").append(std::to_string(rng() % 2000));
            }
            text += ".\n";
        }
        texts.push_back(text);
    }
    return texts;
}

// True when a folder holds a leftover temporary file of an atomic write.
bool has_temp_files(const fs::path& dir) {
    for (const auto& entry : fs::directory_iterator(dir)) {
        if (entry.path().filename().string().find(".tmp") != std::string::npos) return true;
    }
    return false;
}

std::vector<int32_t> iota_tokens(size_t n, int vocab) {
    std::vector<int32_t> tokens(n);
    for (size_t i = 0; i < n; ++i) tokens[i] = static_cast<int32_t>(i % vocab);
    return tokens;
}

}  // namespace

// ---------------------------------------------------------------- corpus

TEST(DataCorpus, FindsInvalidUtf8) {
    EXPECT_EQ(find_invalid_utf8("plain ascii"), std::string::npos);
    EXPECT_EQ(find_invalid_utf8("caf\xC3\xA9 \xE2\x96\x81 \xF0\x9F\x98\x80"), std::string::npos);
    EXPECT_EQ(find_invalid_utf8("ab\xFF"), 2u);
    EXPECT_EQ(find_invalid_utf8("ab\xC3"), 2u);             // truncated sequence
    EXPECT_EQ(find_invalid_utf8("a\xC0\xAF"), 1u);          // overlong '/'
    EXPECT_EQ(find_invalid_utf8("a\xED\xA0\x80"), 1u);      // surrogate U+D800
    EXPECT_EQ(find_invalid_utf8("a\xF4\x90\x80\x80"), 1u);  // U+110000
    EXPECT_EQ(find_invalid_utf8("\xE2\x96X"), 0u);          // bad continuation
}

TEST(DataCorpus, FolderSplitSendsEveryTenthToValidation) {
    TempDir dir;
    // Created out of order, one in a subfolder, plus files that must be ignored.
    for (int i = 19; i >= 0; --i) {
        char name[32];
        std::snprintf(name, sizeof name, "doc%02d.txt", i);
        write_text(dir.file(i == 5 ? std::string("sub/") + name : name), "text " + std::to_string(i));
    }
    write_text(dir.file("doc05.json"), "{}");
    write_text(dir.file("README"), "not a document");
    // "sub/doc05.txt" sorts after every "docNN.txt": order is by full path.
    const std::vector<Document> documents = read_corpus(dir.path.string());
    ASSERT_EQ(documents.size(), 20u);
    EXPECT_EQ(documents.back().text, "text 5");
    const CorpusSplit split = split_corpus(documents);
    ASSERT_EQ(split.val.size(), 2u);
    ASSERT_EQ(split.train.size(), 18u);
    EXPECT_EQ(split.val[0].text, "text 10");  // index 9 of doc00..doc04, doc06..doc19, sub/doc05
    EXPECT_EQ(split.val[1].text, "text 5");   // index 19
    EXPECT_EQ(fs::path(split.val[0].name).filename(), "doc10.txt");
}

TEST(DataCorpus, SingleFileIsCutIntoTenPartsAtNewlines) {
    TempDir dir;
    std::string text;
    for (int i = 0; i < 200; ++i) text += "line " + std::to_string(i) + " of the single-file corpus\n";
    write_text(dir.file("one.txt"), text);
    const std::vector<Document> parts = read_corpus(dir.file("one.txt"));
    ASSERT_EQ(parts.size(), 10u);
    std::string joined;
    for (size_t k = 0; k < parts.size(); ++k) {
        EXPECT_EQ(parts[k].name, dir.file("one.txt") + "#" + std::to_string(k));
        EXPECT_EQ(parts[k].text.back(), '\n');
        EXPECT_NEAR(static_cast<double>(parts[k].text.size()), text.size() / 10.0, 40.0);
        joined += parts[k].text;
    }
    EXPECT_EQ(joined, text);
    EXPECT_EQ(split_corpus(parts).val.front().text, parts[9].text);
}

TEST(DataCorpus, SingleLineFileIsCutAtCharacterBoundaries) {
    TempDir dir;
    std::string text;
    for (int i = 0; i < 300; ++i) text += "é";  // two bytes each, no newline
    write_text(dir.file("line.txt"), text);
    std::string joined;
    for (const Document& part : read_corpus(dir.file("line.txt"))) {
        EXPECT_EQ(find_invalid_utf8(part.text), std::string::npos);
        joined += part.text;
    }
    EXPECT_EQ(joined, text);
}

// JSON Lines: one document per non-blank line's "text", named by file and line, in a folder
// beside .txt files too; a .json file is refused rather than trained on as text.
TEST(DataCorpus, JsonLinesGiveOneDocumentPerLine) {
    TempDir dir;
    std::string lines;
    for (int i = 0; i < 24; ++i) {
        lines += "{\"text\": \"record " + std::to_string(i) + " caf\\u00e9\", \"id\": " + std::to_string(i) + "}\n";
        if (i == 3) lines += "  \n";  // blank lines are skipped
    }
    write_text(dir.file("data/records.jsonl"), lines);
    const std::vector<Document> documents = read_corpus(dir.file("data/records.jsonl"));
    ASSERT_EQ(documents.size(), 24u);
    EXPECT_EQ(documents[4].text, "record 4 caf\xC3\xA9");  // the JSON escape decoded to UTF-8
    EXPECT_EQ(documents[4].name, dir.file("data/records.jsonl") + ":6");  // after the blank line 5
    write_text(dir.file("data/a.txt"), "plain text");
    const std::vector<Document> mixed = read_corpus(dir.file("data"));
    ASSERT_EQ(mixed.size(), 25u);
    EXPECT_EQ(mixed[0].text, "plain text");  // a.txt sorts before records.jsonl

    write_text(dir.file("bad.jsonl"), "{\"text\": \"fine\"}\n[1, 2]\n");
    expect_error([&] { read_corpus(dir.file("bad.jsonl")); }, {dir.file("bad.jsonl") + " line 2", "not a JSON object"});
    write_text(dir.file("key.jsonl"), "{\"content\": \"x\"}\n");
    expect_error([&] { read_corpus(dir.file("key.jsonl")); }, {"line 1 has no string 'text'"});
    write_text(dir.file("whole.json"), "[{\"text\": \"x\"}]");
    expect_error([&] { read_corpus(dir.file("whole.json")); }, {"is JSON: give JSON Lines"});
}

// Fewer than ten documents: each is cut into ten parts, so the last tenth of each validates
// (before, such a folder was refused for want of a tenth document).
TEST(DataCorpus, AFewDocumentsAreEachCutIntoTenParts) {
    TempDir dir;
    std::string text;
    for (int i = 0; i < 100; ++i) text += "line " + std::to_string(i) + "\n";
    for (const char* name : {"a.txt", "b.txt", "c.txt"}) write_text(dir.file(std::string("few/") + name), text);
    const std::vector<Document> parts = read_corpus(dir.file("few"));
    ASSERT_EQ(parts.size(), 30u);
    EXPECT_EQ(parts[9].name, dir.file("few/a.txt") + "#9");
    const CorpusSplit split = split_corpus(parts);
    ASSERT_EQ(split.val.size(), 3u);
    for (const Document& val : split.val) {  // the last tenth of each file, cut after a newline
        EXPECT_TRUE(val.text.ends_with("line 99\n")) << val.text;
        EXPECT_NEAR(static_cast<double>(val.text.size()), text.size() / 10.0, 16.0);
    }
}

TEST(DataCorpus, ErrorsNameTheProblem) {
    TempDir dir;
    expect_error([&] { read_corpus(dir.file("nope")); }, {dir.file("nope"), "not found", "fetch_corpus.sh"});
    expect_error([&] { read_corpus(dir.path.string()); }, {dir.path.string(), "no .txt or .jsonl files"});
    write_text(dir.file("data.json"), "{}");
    expect_error([&] { read_corpus(dir.path.string()); }, {"no .txt or .jsonl files"});
    write_text(dir.file("a.txt"), "fine");
    write_text(dir.file("b.txt"), "caf\xE9 latin-1");
    expect_error([&] { read_corpus(dir.path.string()); }, {dir.file("b.txt"), "invalid UTF-8", "byte offset 3"});
    write_text(dir.file("empty.txt"), "");
    expect_error([&] { read_corpus(dir.file("empty.txt")); }, {dir.file("empty.txt"), "empty"});
}

// ---------------------------------------------------------------- tokenizers

TEST(TokenizerByte, RoundTripsArbitraryBytes) {
    std::mt19937 rng(1);
    const std::string bytes = random_bytes(rng, 10000) + "\xC3\x28\xFF" + std::string(3, '\0');
    const auto tokenizer = make_byte_tokenizer();
    const std::vector<int32_t> tokens = tokenizer->encode(bytes);
    ASSERT_EQ(tokens.size(), bytes.size());
    for (size_t i = 0; i < bytes.size(); ++i) ASSERT_EQ(tokens[i], static_cast<uint8_t>(bytes[i]));
    EXPECT_EQ(tokenizer->decode(tokens), bytes);
    EXPECT_EQ(tokenizer->vocab_size(), 256);
    EXPECT_EQ(tokenizer->kind(), "byte");
    EXPECT_EQ(tokenizer->serialize(), "");
    EXPECT_EQ(load_tokenizer("byte", "")->encode(bytes), tokens);
    const std::vector<int32_t> bad = {65, 256};
    expect_error([&] { tokenizer->decode(bad); }, {"token id 256", "vocabulary of 256"});
}

class TokenizerBpe : public ::testing::Test {
protected:
    static constexpr int kVocab = 400;
    // Trained once for the suite (well under a second).
    static void SetUpTestSuite() { tokenizer_ = train_bpe_tokenizer(generated_texts(10, 200, 7), kVocab, 2); }
    static void TearDownTestSuite() { tokenizer_.reset(); }
    static std::vector<std::string> tricky_texts() {
        std::mt19937 rng(3);
        return {"",
                "the congress of the nation",
                "  leading, double  and trailing spaces  ",
                "naïve café – 日本語 😀 Ωmega ∑ ünseen ß ﬁ",  // characters absent from training
                "literal \xE2\x96\x81 marks\xE2\x96\x81\xE2\x96\x81 (U+2581)",
                std::string("tabs\tcarriage\r\nnull\0byte", 25),
                "invalid \xFF\xFE utf-8 \xC3 \xED\xA0\x80 \xE2\x96",
                "digits 1234567890 0.5",
                random_unicode(rng, 2000),
                random_bytes(rng, 5000)};
    }
    static std::unique_ptr<Tokenizer> tokenizer_;
};
std::unique_ptr<Tokenizer> TokenizerBpe::tokenizer_;

TEST_F(TokenizerBpe, HasRequestedVocabularyAndCompresses) {
    EXPECT_EQ(tokenizer_->vocab_size(), kVocab);
    EXPECT_EQ(tokenizer_->kind(), "bpe");
    const std::string text = generated_texts(1, 50, 99).front();  // unseen text, same lexicon
    const size_t tokens = tokenizer_->encode(text).size();
    EXPECT_LT(tokens * 2, text.size()) << "BPE should beat bytes by 2x on in-domain text";
}

TEST_F(TokenizerBpe, RoundTripsAnyText) {
    for (const std::string& text : tricky_texts()) {
        const std::vector<int32_t> tokens = tokenizer_->encode(text);
        for (int32_t t : tokens) ASSERT_TRUE(t >= 0 && t < kVocab);
        EXPECT_EQ(tokenizer_->decode(tokens), text) << "text: " << text.substr(0, 60);
        // Decoding is token by token (generation decodes one new token at a time).
        std::string joined;
        for (int32_t t : tokens) joined += tokenizer_->decode(std::span<const int32_t>(&t, 1));
        EXPECT_EQ(joined, text) << "text: " << text.substr(0, 60);
    }
}

TEST_F(TokenizerBpe, WordByWordEncodingMatchesSentencepiece) {
    sentencepiece::SentencePieceProcessor reference;
    ASSERT_TRUE(reference.LoadFromSerializedProto(tokenizer_->serialize()).ok());
    std::mt19937 rng(8);
    for (const std::string& text : {generated_texts(1, 100, 21).front(), std::string("  two  spaces,\n\nnew lines  "),
                                    random_unicode(rng, 500)}) {
        std::vector<int> expected;
        ASSERT_TRUE(reference.Encode(text, &expected).ok());
        const std::vector<int32_t> tokens = tokenizer_->encode(text);
        EXPECT_EQ(std::vector<int>(tokens.begin(), tokens.end()), expected);
    }
}

TEST_F(TokenizerBpe, SerializedAndFileCopiesEncodeIdentically) {
    const auto copy = load_tokenizer("bpe", tokenizer_->serialize());
    TempDir dir;
    save_tokenizer_file(dir.file("tokenizer.bin"), *tokenizer_);
    EXPECT_FALSE(has_temp_files(dir.path));
    const auto from_file = load_tokenizer_file(dir.file("tokenizer.bin"));
    EXPECT_EQ(copy->vocab_size(), kVocab);
    EXPECT_EQ(from_file->vocab_size(), kVocab);
    for (const std::string& text : tricky_texts()) {
        const std::vector<int32_t> tokens = tokenizer_->encode(text);
        EXPECT_EQ(copy->encode(text), tokens);
        EXPECT_EQ(from_file->encode(text), tokens);
    }
}

TEST_F(TokenizerBpe, FileErrors) {
    TempDir dir;
    const std::string path = dir.file("tokenizer.bin");
    save_tokenizer_file(path, *tokenizer_);
    std::string bytes = read_bytes(path);
    bytes[bytes.size() / 2] ^= 0x10;
    write_text(path, bytes);
    expect_error([&] { load_tokenizer_file(path); }, {path, "checksum mismatch"});
    write_text(path, bytes.substr(0, 30));
    expect_error([&] { load_tokenizer_file(path); }, {path, "truncated"});
    write_text(path, "something else entirely");
    expect_error([&] { load_tokenizer_file(path); }, {path, "wrong magic"});
    expect_error([&] { load_tokenizer_file(dir.file("none.bin")); }, {dir.file("none.bin"), "not found"});
    expect_error([&] { load_tokenizer("wordpiece", ""); }, {"unknown tokenizer kind 'wordpiece'"});
    expect_error([&] { load_tokenizer("bpe", "garbage"); }, {"not a valid sentencepiece model"});
}

TEST(TokenizerBpeTraining, RejectsImpossibleVocabularies) {
    const std::vector<std::string> texts = generated_texts(2, 20, 5);
    expect_error([&] { train_bpe_tokenizer(texts, 100, 1); }, {"vocabulary size 100"});
    expect_error([&] { train_bpe_tokenizer(texts, 50000, 1); }, {"vocabulary 50000"});
    expect_error([&] { train_bpe_tokenizer(std::vector<std::string>{}, 300, 1); }, {"empty corpus"});
}

// ---------------------------------------------------------------- shards

// A shard written in pieces is the same file as one written whole; one never committed leaves
// nothing behind.
TEST(Shard, PiecesWriteTheSameFileAsAWhole) {
    TempDir dir;
    const std::vector<int32_t> tokens = iota_tokens(70001, 70000);
    write_shard(dir.file("whole.bin"), tokens, 70000, 99);
    {
        ShardWriter pieces(dir.file("pieces.bin"), 70000);
        for (size_t at = 0; at < tokens.size(); at += 9999) {
            pieces.append(std::span(tokens).subspan(at, std::min<size_t>(9999, tokens.size() - at)));
        }
        EXPECT_EQ(pieces.token_count(), tokens.size());
        pieces.commit(99);
    }
    EXPECT_EQ(read_bytes(dir.file("pieces.bin")), read_bytes(dir.file("whole.bin")));
    {
        ShardWriter abandoned(dir.file("abandoned.bin"), 256);
        abandoned.append(iota_tokens(10, 256));
    }
    EXPECT_FALSE(fs::exists(dir.file("abandoned.bin")));
    EXPECT_FALSE(has_temp_files(dir.path));
}

TEST(Shard, RoundTripsTwoAndFourByteTokens) {
    TempDir dir;
    for (const int vocab : {256, 65536, 70000}) {
        const std::string path = dir.file(std::to_string(vocab) + ".bin");
        const std::vector<int32_t> tokens = iota_tokens(100003, vocab);
        write_shard(path, tokens, vocab, 123456789);
        EXPECT_FALSE(has_temp_files(dir.path));
        EXPECT_EQ(fs::file_size(path), 64 + tokens.size() * (vocab <= 65536 ? 2 : 4));
        const Shard shard(path);
        EXPECT_EQ(shard.token_count(), tokens.size());
        EXPECT_EQ(shard.vocab_size(), vocab);
        EXPECT_EQ(shard.source_bytes(), 123456789u);
        EXPECT_EQ(shard.token(99999), tokens[99999]);
        std::vector<int32_t> out(1000);
        shard.read(65000, out.size(), out.data());
        EXPECT_TRUE(std::equal(out.begin(), out.end(), tokens.begin() + 65000));
        expect_error([&] { shard.read(tokens.size() - 5, 6, out.data()); }, {path, "past its"});
    }
    write_shard(dir.file("empty.bin"), {}, 256, 0);
    EXPECT_EQ(Shard(dir.file("empty.bin")).token_count(), 0u);
    // Tokens from no text: eval divided by the 0 bytes and printed "inf bits/byte".
    write_shard(dir.file("no-text.bin"), iota_tokens(10, 256), 256, 0);
    expect_error([&] { Shard shard(dir.file("no-text.bin")); }, {"came from 0 bytes of text"});
}

TEST(Shard, MoveKeepsTheMapping) {
    TempDir dir;
    write_shard(dir.file("a.bin"), iota_tokens(1000, 256), 256, 1000);
    Shard a(dir.file("a.bin"));
    Shard b = std::move(a);
    EXPECT_EQ(b.token(999), 999 % 256);
    write_shard(dir.file("c.bin"), iota_tokens(10, 256), 256, 10);
    b = Shard(dir.file("c.bin"));
    EXPECT_EQ(b.token_count(), 10u);
}

TEST(Shard, DetectsCorruptionTruncationAndWrongFiles) {
    TempDir dir;
    const std::string path = dir.file("train.bin");
    write_shard(path, iota_tokens(5000, 1000), 1000, 9000);
    const std::string good = read_bytes(path);

    std::string corrupt = good;
    corrupt[64 + 777] ^= 0x01;
    write_text(path, corrupt);
    expect_error([&] { Shard s(path); }, {path, "checksum mismatch (file corrupt; re-run dqt data)"});

    corrupt = good;
    corrupt[30] ^= 0x01;  // inside token_count
    write_text(path, corrupt);
    expect_error([&] { Shard s(path); }, {path, "header checksum mismatch"});

    write_text(path, good.substr(0, good.size() - 101));
    expect_error([&] { Shard s(path); }, {path, "truncated (header says 5000 tokens, file holds 4949)"});
    write_text(path, good.substr(0, 40));
    expect_error([&] { Shard s(path); }, {path, "truncated"});

    write_text(path, good + "xx");
    expect_error([&] { Shard s(path); }, {path, "unexpected bytes"});

    write_text(path, "GGUF" + good.substr(4));
    expect_error([&] { Shard s(path); }, {path, "wrong magic (not a dqt shard file)"});
    write_text(path, "tiny");
    expect_error([&] { Shard s(path); }, {path, "wrong magic"});

    expect_error([&] { Shard s(dir.file("missing.bin")); }, {dir.file("missing.bin"), "not found"});
}

// Ids past the vocabulary with valid checksums (a header patched to a smaller vocabulary and
// resealed): refused at open, before any lookup could read outside the embedding table.
TEST(Shard, RefusesTokenIdsOutsideItsVocabulary) {
    TempDir dir;
    const std::string path = dir.file("train.bin");
    write_shard(path, iota_tokens(5000, 300), 300, 9000);
    std::string patched = read_bytes(path);
    const uint32_t smaller_vocab = 256;  // still 2 bytes per token: the header stays consistent
    std::memcpy(&patched[16], &smaller_vocab, sizeof smaller_vocab);
    const uint32_t header_crc = crc32_update(0, patched.data(), 60);
    std::memcpy(&patched[60], &header_crc, sizeof header_crc);
    write_text(path, patched);
    expect_error([&] { Shard s(path); }, {path, "token 256 at position 256 is outside its vocabulary of 256"});
}

TEST(Shard, FailedWriteLeavesNoFile) {
    TempDir dir;
    const std::vector<int32_t> tokens = iota_tokens(100, 256);
    const std::string in_missing_folder = dir.file("no/such/folder/train.bin");
    expect_error([&] { write_shard(in_missing_folder, tokens, 256, 100); }, {in_missing_folder});
    EXPECT_FALSE(fs::exists(fs::path(in_missing_folder).parent_path()));

    // The final rename fails (a folder is in the way): the temporary file must be gone.
    const std::string blocked = dir.file("blocked.bin");
    fs::create_directories(fs::path(blocked) / "child");
    expect_error([&] { write_shard(blocked, tokens, 256, 100); }, {blocked});
    EXPECT_FALSE(has_temp_files(dir.path));

    // A token outside the vocabulary: nothing is written at all.
    const std::string bad = dir.file("bad.bin");
    const std::vector<int32_t> out_of_range = {1, 2, 300};
    expect_error([&] { write_shard(bad, out_of_range, 256, 3); }, {bad, "token 300"});
    EXPECT_FALSE(fs::exists(bad));
    EXPECT_FALSE(has_temp_files(dir.path));
}

// ---------------------------------------------------------------- batches

class Batch : public ::testing::Test {
protected:
    // Token i = i: with 4-byte tokens the offset of any window can be read off its first token.
    void SetUp() override {
        write_shard(dir_.file("train.bin"), iota_tokens(kTokens, kTokens), kTokens, kTokens);
        shard_ = std::make_unique<Shard>(dir_.file("train.bin"));
    }
    static constexpr int kTokens = 100000;
    TempDir dir_;
    std::unique_ptr<Shard> shard_;
};

TEST_F(Batch, IsDeterministicInRangeAndShifted) {
    const int B = 8, T = 64;
    std::vector<int32_t> inputs(B * T), targets(B * T), inputs2(B * T), targets2(B * T);  // (B, T)
    sample_sequences(*shard_, 1234, 7, 0, B, T, inputs.data(), targets.data());
    sample_sequences(*shard_, 1234, 7, 0, B, T, inputs2.data(), targets2.data());
    EXPECT_EQ(inputs, inputs2);
    EXPECT_EQ(targets, targets2);
    for (int b = 0; b < B; ++b) {
        const int32_t start = inputs[b * T];
        ASSERT_GE(start, 0);
        ASSERT_LE(start + T, kTokens - 1);  // last target inside the shard
        for (int t = 0; t < T; ++t) {
            ASSERT_EQ(inputs[b * T + t], start + t);
            ASSERT_EQ(targets[b * T + t], start + t + 1);
        }
    }
    sample_sequences(*shard_, 1234, 8, 0, B, T, inputs2.data(), targets2.data());
    EXPECT_NE(inputs, inputs2) << "another step draws other windows";
    sample_sequences(*shard_, 99, 7, 0, B, T, inputs2.data(), targets2.data());
    EXPECT_NE(inputs, inputs2) << "another seed draws other windows";
}

TEST_F(Batch, SlicesAndMicroStepsMatchTheGlobalBatch) {
    const int global = 12, T = 16;
    std::vector<int32_t> inputs(global * T), targets(global * T);  // (global, T)
    sample_sequences(*shard_, 5, 3, 0, global, T, inputs.data(), targets.data());
    // Data-parallel ranks: rank r of 3 takes sequences [4r, 4r + 4).
    for (int first = 0; first < global; first += 4) {
        std::vector<int32_t> slice_in(4 * T), slice_tg(4 * T);  // (4, T)
        sample_sequences(*shard_, 5, 3, first, 4, T, slice_in.data(), slice_tg.data());
        EXPECT_TRUE(std::equal(slice_in.begin(), slice_in.end(), inputs.begin() + first * T));
        EXPECT_TRUE(std::equal(slice_tg.begin(), slice_tg.end(), targets.begin() + first * T));
    }
    // Gradient accumulation: micro-step m of batch 6 holds global sequences [6m, 6m + 6).
    std::vector<int32_t> micro_in(6 * T), micro_tg(6 * T);  // (6, T)
    sample_sequences(*shard_, 5, 3, 6, 6, T, micro_in.data(), micro_tg.data());  // micro-step 1
    EXPECT_TRUE(std::equal(micro_in.begin(), micro_in.end(), inputs.begin() + 6 * T));
}

TEST_F(Batch, RejectsShardsShorterThanASequence) {
    write_shard(dir_.file("small.bin"), iota_tokens(64, 256), 256, 64);
    const Shard small(dir_.file("small.bin"));
    std::vector<int32_t> inputs(64), targets(64);
    sample_sequences(small, 1, 0, 0, 1, 63, inputs.data(), targets.data());  // the only window
    EXPECT_EQ(inputs[0], 0);
    EXPECT_EQ(targets[62], 63);
    expect_error([&] { sample_sequences(small, 1, 0, 0, 1, 64, inputs.data(), targets.data()); },
                 {dir_.file("small.bin"), "too few", "--seq-len"});
}

TEST_F(Batch, EvalWindowsAreContiguousFromTheStart) {
    const int T = 1000;
    EXPECT_EQ(eval_window_count(*shard_, T, 0), static_cast<size_t>((kTokens - 1) / T));  // 99: each needs T + 1
    EXPECT_EQ(eval_window_count(*shard_, T, 10500), 10u);
    EXPECT_EQ(eval_window_count(*shard_, T, 10u * kTokens), 99u);
    std::vector<int32_t> inputs(T), targets(T);
    for (size_t w : {size_t{0}, size_t{1}, size_t{98}}) {
        eval_window(*shard_, w, T, inputs.data(), targets.data());
        EXPECT_EQ(inputs[0], static_cast<int32_t>(w * T));
        EXPECT_EQ(inputs[T - 1], static_cast<int32_t>(w * T + T - 1));
        EXPECT_EQ(targets[T - 1], static_cast<int32_t>(w * T + T));
    }
    expect_error([&] { eval_window(*shard_, 99, T, inputs.data(), targets.data()); }, {"past the end"});
}

// ---------------------------------------------------------------- datasets

TEST(DataDataset, PreparesAndOpensAByteDataset) {
    TempDir dir;
    const std::vector<std::string> texts = generated_texts(20, 5, 11);
    for (size_t i = 0; i < texts.size(); ++i) {
        write_text(dir.file("corpus/d" + std::to_string(100 + i) + ".txt"), texts[i]);
    }
    const std::string out = dir.file("prepared");
    const DatasetInfo info = prepare_dataset(dir.file("corpus"), out, "byte", 0);
    EXPECT_EQ(info.train.documents, 18);
    EXPECT_EQ(info.val.documents, 2);
    EXPECT_EQ(info.val.bytes, static_cast<int64_t>(texts[9].size() + 2 + texts[19].size()));
    EXPECT_EQ(info.val.tokens, info.val.bytes);
    for (const char* file : {"train.bin", "val.bin", "tokenizer.bin", "meta.json"}) {
        EXPECT_TRUE(fs::exists(out + "/" + file));
    }
    EXPECT_FALSE(has_temp_files(out));
    EXPECT_NE(read_bytes(out + "/meta.json").find("\"tokens\": " + std::to_string(info.train.tokens)),
              std::string::npos);

    const Dataset dataset = open_dataset(out);
    EXPECT_EQ(dataset.tokenizer->kind(), "byte");
    EXPECT_EQ(dataset.val.source_bytes(), static_cast<uint64_t>(info.val.bytes));
    std::vector<int32_t> val(dataset.val.token_count());
    dataset.val.read(0, val.size(), val.data());
    EXPECT_EQ(dataset.tokenizer->decode(val), texts[9] + "\n\n" + texts[19]);
}

TEST(DataDataset, BpeDatasetDecodesToTheJoinedText) {
    TempDir dir;
    const std::vector<std::string> texts = generated_texts(10, 40, 12);
    std::string whole;
    for (const std::string& text : texts) whole += text;
    write_text(dir.file("corpus.txt"), whole);  // a single file: ten parts
    const std::string out = dir.file("prepared");
    const DatasetInfo info = prepare_dataset(dir.file("corpus.txt"), out, "bpe", 320);
    EXPECT_EQ(info.vocab_size, 320);
    EXPECT_EQ(info.train.documents + info.val.documents, 10);
    EXPECT_LT(info.train.tokens, info.train.bytes);

    const Dataset dataset = open_dataset(out);
    std::vector<int32_t> val(dataset.val.token_count());
    dataset.val.read(0, val.size(), val.data());
    const std::vector<Document> parts = read_corpus(dir.file("corpus.txt"));
    EXPECT_EQ(dataset.tokenizer->decode(val), parts[9].text);
}

// --val-fraction spreads the held-out documents evenly (0.1 gives the old every-10th rule),
// --text-key reads another JSON Lines field, --val-corpus validates on a corpus of its own
// (read whole, not cut in tenths) and trains on every document.
TEST(DataDataset, SplitsAsAskedAndReadsTheNamedKey) {
    TempDir dir;
    std::vector<Document> documents(40);
    for (size_t i = 0; i < documents.size(); ++i) documents[i].text = std::to_string(i);
    const auto val_texts = [&](double fraction) {
        std::vector<std::string> texts;
        for (const Document& d : split_corpus(documents, fraction).val) texts.push_back(d.text);
        return texts;
    };
    EXPECT_EQ(val_texts(0.1), (std::vector<std::string>{"9", "19", "29", "39"}));
    EXPECT_EQ(val_texts(0.25), (std::vector<std::string>{"3", "7", "11", "15", "19", "23", "27", "31", "35", "39"}));
    EXPECT_EQ(val_texts(0.5).size(), 20u);
    EXPECT_EQ(val_texts(0.03), (std::vector<std::string>{"33"}));
    expect_error([&] { split_corpus(documents, 0.6); }, {"validation fraction 0.6 is outside (0, 0.5]"});

    std::string lines;
    for (int i = 0; i < 20; ++i) lines += "{\"body\": \"record " + std::to_string(i) + "\"}\n";
    write_text(dir.file("records.jsonl"), lines);
    CorpusOptions options;
    options.text_key = "body";
    options.val_fraction = 0.25;
    const DatasetInfo quarter = prepare_dataset(dir.file("records.jsonl"), dir.file("quarter"), "byte", 0, nullptr, options);
    EXPECT_EQ(quarter.val.documents, 5);
    EXPECT_EQ(quarter.train.documents, 15);
    EXPECT_NE(read_bytes(dir.file("quarter/meta.json")).find("floor((i + 1) * 0.25) > floor(i * 0.25)"), std::string::npos);

    write_text(dir.file("held-out.txt"), "a held-out text, read whole");
    options.val_corpus = dir.file("held-out.txt");
    const DatasetInfo named = prepare_dataset(dir.file("records.jsonl"), dir.file("named"), "byte", 0, nullptr, options);
    EXPECT_EQ(named.train.documents, 20);
    EXPECT_EQ(named.val.documents, 1);
    const Dataset dataset = open_dataset(dir.file("named"));
    std::vector<int32_t> val(dataset.val.token_count());
    dataset.val.read(0, val.size(), val.data());
    EXPECT_EQ(dataset.tokenizer->decode(val), "a held-out text, read whole");

    options.val_corpus.clear();
    options.text_key = "text";
    expect_error([&] { prepare_dataset(dir.file("records.jsonl"), dir.file("no-key"), "byte", 0, nullptr, options); },
                 {"line 1 has no string 'text'", "--text-key"});
}

// The corpus is read and tokenized a batch of documents at a time (DocumentStream, 256
// documents a batch): a corpus of many batches gives the dataset the whole corpus would, and a
// bad document late in it leaves no dataset folder behind.
TEST(DataDataset, StreamsACorpusOfManyBatches) {
    TempDir dir;
    const std::vector<std::string> texts = generated_texts(700, 2, 21);
    std::string lines;
    for (const std::string& text : texts) lines += nlohmann::json{{"text", text}}.dump() + "\n";
    write_text(dir.file("many.jsonl"), lines);
    std::vector<Document> streamed;
    DocumentStream stream(dir.file("many.jsonl"));
    for (Document d; stream.next(d);) streamed.push_back(d);
    ASSERT_EQ(streamed.size(), texts.size());
    EXPECT_EQ(count_documents(dir.file("many.jsonl")), texts.size());
    EXPECT_EQ(streamed[699].text, texts[699]);

    const DatasetInfo info = prepare_dataset(dir.file("many.jsonl"), dir.file("out"), "bpe", 300);
    EXPECT_EQ(info.train.documents, 630);
    EXPECT_EQ(info.val.documents, 70);
    const Dataset dataset = open_dataset(dir.file("out"));
    std::string train_text, val_text;
    for (size_t i = 0; i < texts.size(); ++i) {
        std::string& joined = i % 10 == 9 ? val_text : train_text;
        joined += (joined.empty() ? "" : "\n\n") + texts[i];
    }
    std::vector<int32_t> tokens(dataset.train.token_count());
    dataset.train.read(0, tokens.size(), tokens.data());
    EXPECT_EQ(dataset.tokenizer->decode(tokens), train_text);
    EXPECT_EQ(info.train.bytes, static_cast<int64_t>(train_text.size()));
    // The same texts whole, through the in-memory BPE trainer and encoder: the same tokens.
    std::vector<std::string> train_texts;
    for (size_t i = 0; i < texts.size(); ++i) {
        if (i % 10 != 9) train_texts.push_back(texts[i]);
    }
    EXPECT_TRUE(same_tokenizer(*train_bpe_tokenizer(train_texts, 300, 2), *dataset.tokenizer));

    write_text(dir.file("late-error.jsonl"), lines + "{\"text\": 3}\n");
    expect_error([&] { prepare_dataset(dir.file("late-error.jsonl"), dir.file("never"), "byte", 0); },
                 {"line 701 has no string 'text'"});
    EXPECT_FALSE(fs::exists(dir.file("never")));
}

TEST(DataDataset, ErrorsNameTheMissingPiece) {
    TempDir dir;
    for (int i = 0; i < 5; ++i) write_text(dir.file("few/" + std::to_string(i) + ".txt"), "ab\n");
    // Five 3-byte documents, each cut into ten parts after its newline: the last parts are empty.
    expect_error([&] { prepare_dataset(dir.file("few"), dir.file("out"), "byte", 0); },
                 {"leaves no text for validation", "give it more text"});
    expect_error([&] { prepare_dataset(dir.file("few"), dir.file("out"), "words", 0); }, {"unknown tokenizer 'words'"});
    EXPECT_FALSE(fs::exists(dir.file("out")));

    expect_error([&] { open_dataset(dir.file("out")); }, {dir.file("out"), "not found", "dqt data"});
    fs::create_directories(dir.file("out"));
    write_shard(dir.file("out/train.bin"), iota_tokens(100, 256), 256, 100);
    expect_error([&] { open_dataset(dir.file("out")); },
                 {"dataset folder " + dir.file("out") + " has no val.bin", "dqt data"});
    write_shard(dir.file("out/val.bin"), iota_tokens(100, 300), 300, 100);
    expect_error([&] { open_dataset(dir.file("out")); }, {"has no tokenizer.bin"});
    save_tokenizer_file(dir.file("out/tokenizer.bin"), *make_byte_tokenizer());
    expect_error([&] { open_dataset(dir.file("out")); }, {"val.bin has vocabulary 300 but tokenizer.bin has 256"});
}
