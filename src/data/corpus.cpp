#include "data/corpus.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/atomic_file.h"

namespace dqt {
namespace fs = std::filesystem;

namespace {

Document read_document(const std::string& path) {
    Document document{path, read_file(path, "corpus file")};
    const size_t bad = find_invalid_utf8(document.text);
    require(bad == std::string::npos, "corpus file " + path + ": invalid UTF-8 at byte offset " + std::to_string(bad) +
                                          ": convert it to UTF-8 (e.g. iconv -f latin1 -t utf-8)");
    return document;
}

// Line `line` of a JSON Lines file as a document: the object's text_key; false for a blank line.
bool jsonl_document(const std::string& path, size_t line, std::string_view text, const std::string& text_key,
                    Document& out) {
    if (text.find_first_not_of(" \t\r") == std::string_view::npos) return false;
    const std::string where = "corpus file " + path + " line " + std::to_string(line);
    const nlohmann::json object = nlohmann::json::parse(text, nullptr, false);
    require(!object.is_discarded() && object.is_object(),
            where + " is not a JSON object: a .jsonl corpus holds one {\"" + text_key + "\": \"...\"} object a line");
    require(object.contains(text_key) && object.at(text_key).is_string(),
            where + " has no string " + quote_untrusted(text_key, 40) + " (choose the key with --text-key)");
    out = Document{path + ":" + std::to_string(line), object.at(text_key).get<std::string>()};
    const size_t bad = find_invalid_utf8(out.text);
    require(bad == std::string::npos, where + ": invalid UTF-8 in " + quote_untrusted(text_key, 40) + " at byte offset " + std::to_string(bad));
    return true;
}

bool is_jsonl(const fs::path& path) { return path.extension() == ".jsonl"; }

// Cuts one text into kCorpusFileParts contiguous parts (see read_corpus).
std::vector<Document> cut_into_parts(const Document& whole) {
    const std::string& text = whole.text;
    const size_t n = text.size();
    std::vector<Document> parts;
    size_t start = 0;
    for (int k = 1; k <= kCorpusFileParts; ++k) {
        size_t end = n;
        if (k < kCorpusFileParts) {
            end = std::max(start, n * k / kCorpusFileParts);
            const size_t next_cut = n * (k + 1) / kCorpusFileParts;
            const size_t newline = text.find('\n', end);
            if (newline != std::string::npos && newline < next_cut) {
                end = newline + 1;
            } else {
                while (end < n && (static_cast<uint8_t>(text[end]) & 0xC0) == 0x80) ++end;  // UTF-8 continuation
            }
        }
        parts.push_back({whole.name + "#" + std::to_string(k - 1), text.substr(start, end - start)});
        start = end;
    }
    return parts;
}

}  // namespace

size_t find_invalid_utf8(std::string_view text) {
    const size_t n = text.size();
    size_t i = 0;
    while (i < n) {
        const auto lead = static_cast<uint8_t>(text[i]);
        if (lead < 0x80) {
            ++i;
            continue;
        }
        size_t length;
        uint32_t code_point, smallest;  // smallest code point this length may encode (no overlongs)
        if ((lead & 0xE0) == 0xC0) {
            length = 2, code_point = lead & 0x1F, smallest = 0x80;
        } else if ((lead & 0xF0) == 0xE0) {
            length = 3, code_point = lead & 0x0F, smallest = 0x800;
        } else if ((lead & 0xF8) == 0xF0) {
            length = 4, code_point = lead & 0x07, smallest = 0x10000;
        } else {
            return i;
        }
        if (n - i < length) return i;
        for (size_t k = 1; k < length; ++k) {
            const auto continuation = static_cast<uint8_t>(text[i + k]);
            if ((continuation & 0xC0) != 0x80) return i;
            code_point = (code_point << 6) | (continuation & 0x3F);
        }
        const bool surrogate = code_point >= 0xD800 && code_point <= 0xDFFF;
        if (code_point < smallest || code_point > 0x10FFFF || surrogate) return i;
        i += length;
    }
    return std::string::npos;
}

namespace {

// The corpus's files in reading order: a folder's *.txt and *.jsonl files (recursively, sorted
// by path), or the one file.
std::vector<std::string> corpus_files(const std::string& path) {
    std::error_code ec;
    require(fs::exists(path, ec),
            "corpus " + path + " not found: run scripts/fetch_corpus.sh or pass an existing file or folder");
    if (!fs::is_directory(path, ec)) {
        // Checked before opening: opening a FIFO waits for a writer, a device may never end.
        require(fs::is_regular_file(path, ec), "corpus " + path + " is not a regular file or folder");
        require(is_jsonl(path) || fs::path(path).extension() != ".json",
                "corpus file " + path + " is JSON: give JSON Lines (*.jsonl, one {\"text\": \"...\"} object a line) or "
                "plain UTF-8 text");
        return {path};
    }
    std::vector<std::string> files;
    try {
        for (const fs::directory_entry& entry : fs::recursive_directory_iterator(path)) {
            const bool text_file = entry.is_regular_file() && (entry.path().extension() == ".txt" || is_jsonl(entry.path()));
            if (text_file) files.push_back(entry.path().string());
        }
    } catch (const fs::filesystem_error& e) {
        throw Error("corpus folder " + path + ": cannot list its files (" + e.code().message() + "): check permissions");
    }
    require(!files.empty(),
            "corpus folder " + path + " holds no .txt or .jsonl files: put UTF-8 text files (*.txt) or JSON Lines in it");
    std::sort(files.begin(), files.end());
    return files;
}

}  // namespace

DocumentStream::DocumentStream(const std::string& path, const std::string& text_key)
    : files_(corpus_files(path)), text_key_(text_key) {}

bool DocumentStream::next(Document& out) {
    for (;;) {
        if (jsonl_.is_open()) {
            std::string line;
            while (std::getline(jsonl_, line)) {
                if (jsonl_document(files_[file_ - 1], ++line_, line, text_key_, out)) return true;
            }
            require(jsonl_.eof(), "cannot read corpus file " + files_[file_ - 1]);
            jsonl_.close();
        }
        if (file_ == files_.size()) return false;
        const std::string& file = files_[file_++];
        if (!is_jsonl(file)) {
            out = read_document(file);
            return true;
        }
        jsonl_.open(file, std::ios::binary);
        require(jsonl_.is_open(), "cannot open corpus file " + file);
        line_ = 0;
    }
}

size_t count_documents(const std::string& path) {
    size_t count = 0;
    for (const std::string& file : corpus_files(path)) {
        if (!is_jsonl(file)) {
            ++count;
            continue;
        }
        std::ifstream in(file, std::ios::binary);
        require(in.is_open(), "cannot open corpus file " + file);
        for (std::string line; std::getline(in, line);) count += line.find_first_not_of(" \t\r") != std::string::npos;
    }
    return count;
}

std::vector<Document> read_corpus(const std::string& path, const std::string& text_key, bool cut_small_corpus) {
    std::vector<Document> documents;
    DocumentStream stream(path, text_key);
    for (Document document; stream.next(document);) documents.push_back(std::move(document));
    if (cut_small_corpus && documents.size() < static_cast<size_t>(kCorpusFileParts)) {
        std::vector<Document> parts;
        for (const Document& document : documents) {
            for (Document& part : cut_into_parts(document)) parts.push_back(std::move(part));
        }
        documents = std::move(parts);
    }
    const bool all_empty =
        std::all_of(documents.begin(), documents.end(), [](const Document& d) { return d.text.empty(); });
    require(!all_empty, "corpus " + path + " is empty: it needs some text to train on");
    return documents;
}

namespace {

// The validation fraction in millionths: integer arithmetic, so that 0.1 puts exactly every
// 10th document in validation.
uint64_t val_millionths(double val_fraction) {
    require(val_fraction > 0.0 && val_fraction <= 0.5,
            "validation fraction " + format_number(val_fraction) + " is outside (0, 0.5]: choose e.g. 0.1");
    return static_cast<uint64_t>(std::llround(val_fraction * 1e6));
}

}  // namespace

bool is_validation_document(uint64_t i, double val_fraction) {
    const uint64_t f = val_millionths(val_fraction);
    return (i + 1) * f / 1'000'000 > i * f / 1'000'000;
}

CorpusSplit split_corpus(std::vector<Document> documents, double val_fraction) {
    CorpusSplit split;
    for (uint64_t i = 0; i < documents.size(); ++i) {
        (is_validation_document(i, val_fraction) ? split.val : split.train).push_back(std::move(documents[i]));
    }
    return split;
}

std::string split_rule(double val_fraction) {
    const uint64_t f = val_millionths(val_fraction);
    if (f == 100'000) return "document i (sorted by path) goes to val when i % 10 == 9";
    return "document i (sorted by path) goes to val when floor((i + 1) * " + format_number(val_fraction) +
           ") > floor(i * " + format_number(val_fraction) + ")";
}

}  // namespace dqt
