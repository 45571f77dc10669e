#pragma once
// A text corpus: UTF-8 documents read from one file or a folder tree, split into
// training and validation documents by a fixed, documented rule.
#include <cstddef>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

namespace dqt {

struct Document {
    std::string name;  // file path; "path:N" for line N of a JSON Lines file; "...#k" for part k
    std::string text;  // valid UTF-8
};

// Reads a corpus.
// - A folder: every *.txt and *.jsonl file below it (recursively), sorted by path; a .txt file
//   is one document.
// - A JSON Lines file (*.jsonl, alone or in a folder): one document per non-blank line, each
//   line an object whose `text_key` ("text" unless asked) is a string (the layout of most
//   published text datasets).
// - A single .txt file: one document, cut as below.
// With cut_small_corpus, a corpus of fewer than kCorpusFileParts documents has each document cut into
// kCorpusFileParts contiguous parts of about equal size, each cut moved forward to just after
// the next newline (or, in a text without one, to the next character boundary), so the split
// rule below keeps the last tenth of each for validation.
// Throws dqt::Error for a missing path, a folder without .txt or .jsonl files, a .json file
// (not JSON Lines), a line that is not such an object (naming the file and line), or invalid
// UTF-8 (naming the file and the byte offset).
std::vector<Document> read_corpus(const std::string& path, const std::string& text_key = "text",
                                  bool cut_small_corpus = true);
inline constexpr int kCorpusFileParts = 10;

// The documents of a corpus one at a time, in read_corpus's order and with its errors, but
// uncut: a corpus larger than memory is read holding one document (one file, or one line of a
// JSON Lines file) at a time.
class DocumentStream {
public:
    explicit DocumentStream(const std::string& path, const std::string& text_key = "text");
    // The next document into out; false at the end.
    bool next(Document& out);

private:
    std::vector<std::string> files_;
    size_t file_ = 0;  // files opened so far
    std::string text_key_;
    std::ifstream jsonl_;  // the JSON Lines file being read, line by line
    size_t line_ = 0;
};

// How many documents a DocumentStream gives: one per .txt file, one per non-blank line of a
// JSON Lines file (counted, not parsed).
size_t count_documents(const std::string& path);

inline constexpr double kDefaultValFraction = 0.1;

struct CorpusSplit {
    std::vector<Document> train;
    std::vector<Document> val;
};

// Document i (in read_corpus order) goes to validation when floor((i + 1) f) > floor(i f), f the
// validation fraction (in (0, 0.5], counted in millionths), else to training: a split spread
// evenly over the whole corpus (for SOTU: over all eras). f = 0.1 (the default): i % 10 == 9.
CorpusSplit split_corpus(std::vector<Document> documents, double val_fraction = kDefaultValFraction);
// That rule for document i alone.
bool is_validation_document(uint64_t i, double val_fraction);
// "document i (sorted by path) goes to val when ...": the rule above for f, as meta.json says it.
std::string split_rule(double val_fraction);

// Byte offset of the first invalid UTF-8 sequence in text (overlong forms, surrogates and
// code points above U+10FFFF are invalid), or std::string::npos when it is all valid.
size_t find_invalid_utf8(std::string_view text);

}  // namespace dqt
