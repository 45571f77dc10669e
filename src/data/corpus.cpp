#include "data/corpus.h"

#include <algorithm>
#include <cstdint>
#include <filesystem>

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

std::vector<Document> read_corpus(const std::string& path) {
    std::error_code ec;
    require(fs::exists(path, ec),
            "corpus " + path + " not found: run scripts/fetch_corpus.sh or pass an existing file or folder");
    std::vector<Document> documents;
    if (fs::is_directory(path, ec)) {
        std::vector<std::string> files;
        try {
            for (const fs::directory_entry& entry : fs::recursive_directory_iterator(path)) {
                const bool text_file = entry.is_regular_file() && entry.path().extension() == ".txt";
                if (text_file) files.push_back(entry.path().string());
            }
        } catch (const fs::filesystem_error& e) {
            throw Error("corpus folder " + path + ": cannot list its files (" + e.code().message() +
                        "): check permissions");
        }
        require(!files.empty(), "corpus folder " + path + " holds no .txt files: put UTF-8 text files (*.txt) in it");
        std::sort(files.begin(), files.end());
        for (const std::string& file : files) documents.push_back(read_document(file));
    } else {
        documents = cut_into_parts(read_document(path));
    }
    const bool all_empty =
        std::all_of(documents.begin(), documents.end(), [](const Document& d) { return d.text.empty(); });
    require(!all_empty, "corpus " + path + " is empty: it needs some text to train on");
    return documents;
}

CorpusSplit split_corpus(std::vector<Document> documents) {
    CorpusSplit split;
    for (size_t i = 0; i < documents.size(); ++i) {
        (i % 10 == 9 ? split.val : split.train).push_back(std::move(documents[i]));
    }
    return split;
}

}  // namespace dqt
