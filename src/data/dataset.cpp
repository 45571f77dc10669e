#include "data/dataset.h"

#include <algorithm>
#include <exception>
#include <filesystem>
#include <memory>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/parallel.h"
#include "data/corpus.h"
#include "io/atomic_file.h"

namespace dqt {
namespace fs = std::filesystem;

namespace {

// Documents are tokenized in batches of this many (or this many bytes), each batch in
// parallel: what is held is one batch, whatever the corpus's size.
constexpr size_t kBatchDocuments = 256;
constexpr size_t kBatchBytes = size_t{64} << 20;

// The corpus's documents with their split, one at a time (data/corpus.h): the corpus's own
// documents by the split rule, or all of them for training and the named validation corpus's
// for validation. A corpus of fewer than kCorpusFileParts documents is cut into tenths, so it
// is read whole (it is a few documents).
class SplitDocuments {
public:
    SplitDocuments(const std::string& corpus_path, const CorpusOptions& options) : path_(corpus_path), options_(options) {
        named_val_ = !options.val_corpus.empty();
        if (!named_val_ && count_documents(corpus_path) < static_cast<size_t>(kCorpusFileParts)) {
            parts_ = read_corpus(corpus_path, options.text_key);
            small_ = true;
        } else {
            stream_ = std::make_unique<DocumentStream>(corpus_path, options.text_key);
        }
    }

    // The next document and whether it validates; false at the end.
    bool next(Document& document, bool& val) {
        if (small_) {
            if (index_ == parts_.size()) return false;
            document = parts_[index_];
            val = is_validation_document(index_++, options_.val_fraction);
            return true;
        }
        if (stream_->next(document)) {
            val = reading_val_ || (!named_val_ && is_validation_document(index_, options_.val_fraction));
            ++index_;
            return true;
        }
        if (!named_val_ || reading_val_) return false;
        reading_val_ = true;
        stream_ = std::make_unique<DocumentStream>(options_.val_corpus, options_.text_key);
        return next(document, val);
    }

private:
    std::string path_;
    CorpusOptions options_;
    bool named_val_ = false;
    bool small_ = false;
    std::vector<Document> parts_;  // small corpora: the tenths
    std::unique_ptr<DocumentStream> stream_;
    bool reading_val_ = false;     // the named validation corpus
    size_t index_ = 0;
};

// One split's shard, written as its documents come, joined by kDocumentSeparator's tokens.
class SplitWriter {
public:
    SplitWriter(const std::string& path, const Tokenizer& tokenizer)
        : shard_(path, tokenizer.vocab_size()), separator_(tokenizer.encode(kDocumentSeparator)) {}

    void add(const std::vector<int32_t>& tokens, size_t text_bytes) {
        if (info_.documents > 0) {
            shard_.append(separator_);
            info_.bytes += static_cast<int64_t>(std::string_view(kDocumentSeparator).size());
        }
        shard_.append(tokens);
        info_.bytes += static_cast<int64_t>(text_bytes);
        info_.documents += 1;
        has_text_ = has_text_ || text_bytes > 0;
    }
    bool has_text() const { return has_text_; }
    SplitInfo commit() {
        info_.tokens = static_cast<int64_t>(shard_.token_count());
        shard_.commit(static_cast<uint64_t>(info_.bytes));
        return info_;
    }

private:
    ShardWriter shard_;
    std::vector<int32_t> separator_;
    SplitInfo info_;
    bool has_text_ = false;
};

// Tokenizes the batch in parallel (the result does not depend on the thread count) and hands
// each document to its split's writer, in order.
void write_batch(std::vector<Document>& batch, std::vector<bool>& val, const Tokenizer& tokenizer, SplitWriter& train,
                 SplitWriter& validation) {
    std::vector<std::vector<int32_t>> encoded(batch.size());
    std::exception_ptr failure;
#pragma omp parallel for schedule(dynamic)
    for (size_t i = 0; i < batch.size(); ++i) {
        try {
            encoded[i] = tokenizer.encode(batch[i].text);
        } catch (...) {
#pragma omp critical
            failure = std::current_exception();
        }
    }
    if (failure) std::rethrow_exception(failure);
    for (size_t i = 0; i < batch.size(); ++i) (val[i] ? validation : train).add(encoded[i], batch[i].text.size());
    batch.clear();
    val.clear();
}

nlohmann::json split_json(const SplitInfo& info) {
    return {{"documents", info.documents}, {"tokens", info.tokens}, {"bytes", info.bytes}};
}

// Removes a dataset folder this run created, unless the run got to the end.
class CreatedFolder {
public:
    explicit CreatedFolder(const std::string& path) : path_(path) {
        std::error_code ec;
        created_ = !fs::exists(path, ec);
        fs::create_directories(path, ec);
        require(fs::is_directory(path),
                "cannot create dataset folder " + path + " (" + ec.message() + "): check the path and its permissions");
    }
    ~CreatedFolder() {
        std::error_code ignored;
        if (created_ && !kept_) fs::remove_all(path_, ignored);
    }
    CreatedFolder(const CreatedFolder&) = delete;
    CreatedFolder& operator=(const CreatedFolder&) = delete;
    void keep() { kept_ = true; }

private:
    std::string path_;
    bool created_ = false;
    bool kept_ = false;
};

}  // namespace

DatasetInfo prepare_dataset(const std::string& corpus_path, const std::string& out_dir,
                            const std::string& tokenizer_kind, int bpe_vocab, const Tokenizer* existing,
                            const CorpusOptions& corpus) {
    require(existing || tokenizer_kind == "byte" || tokenizer_kind == "bpe",
            "unknown tokenizer '" + tokenizer_kind + "': use byte or bpe");
    const bool named_val = !corpus.val_corpus.empty();
    std::unique_ptr<Tokenizer> made;
    if (existing) {
        const SplitDocuments check(corpus_path, corpus);  // the corpus's errors before any folder is made
    } else if (tokenizer_kind == "bpe") {
        // A first pass over the training documents.
        SplitDocuments documents(corpus_path, corpus);
        made = train_bpe_tokenizer(
            [&](std::string& text) {
                Document document;
                for (bool val = false; documents.next(document, val);) {
                    if (val) continue;
                    text = std::move(document.text);
                    return true;
                }
                return false;
            },
            bpe_vocab, num_threads());
    } else {
        made = make_byte_tokenizer();
    }
    const Tokenizer& tokenizer = existing ? *existing : *made;

    CreatedFolder folder(out_dir);
    SplitWriter train(out_dir + "/train.bin", tokenizer), validation(out_dir + "/val.bin", tokenizer);
    SplitDocuments documents(corpus_path, corpus);
    std::vector<Document> batch;
    std::vector<bool> val;
    size_t batch_bytes = 0;
    Document document;
    for (bool is_val = false; documents.next(document, is_val);) {
        batch_bytes += document.text.size();
        batch.push_back(std::move(document));
        val.push_back(is_val);
        if (batch.size() == kBatchDocuments || batch_bytes >= kBatchBytes) {
            write_batch(batch, val, tokenizer, train, validation);
            batch_bytes = 0;
        }
    }
    write_batch(batch, val, tokenizer, train, validation);
    require(validation.has_text(), named_val ? "validation corpus " + corpus.val_corpus + " holds no text"
                                             : "corpus " + corpus_path + " leaves no text for validation (" +
                                                   split_rule(corpus.val_fraction) +
                                                   "; a corpus of fewer than 10 documents is cut in tenths first): give "
                                                   "it more text or a larger --val-fraction");
    DatasetInfo info;
    info.tokenizer_kind = tokenizer.kind();
    info.vocab_size = tokenizer.vocab_size();
    info.train = train.commit();
    info.val = validation.commit();
    save_tokenizer_file(out_dir + "/tokenizer.bin", tokenizer);

    const nlohmann::json meta = {
        {"format", "dqt-dataset"},
        {"version", 1},
        {"corpus", corpus_path},
        {"split_rule", named_val ? "every document of the corpus trains; val is " + corpus.val_corpus
                                 : split_rule(corpus.val_fraction)},
        {"document_separator", kDocumentSeparator},
        {"tokenizer", info.tokenizer_kind},
        {"vocab_size", info.vocab_size},
        {"train", split_json(info.train)},
        {"val", split_json(info.val)},
    };
    write_file_atomic(out_dir + "/meta.json", meta.dump(2) + "\n");
    folder.keep();
    return info;
}

Dataset open_dataset(const std::string& dir) {
    const std::string fix = ": run `dqt data --corpus <corpus> --out " + dir + "`";
    std::error_code ec;
    require(fs::is_directory(dir, ec), "dataset folder " + dir + " not found" + fix);
    for (const char* file : {"train.bin", "val.bin", "tokenizer.bin"}) {
        require(fs::exists(dir + "/" + file, ec), "dataset folder " + dir + " has no " + file + fix);
    }
    Dataset dataset{load_tokenizer_file(dir + "/tokenizer.bin"), Shard(dir + "/train.bin"), Shard(dir + "/val.bin")};
    for (const Shard* shard : {&dataset.train, &dataset.val}) {
        require(shard->vocab_size() == dataset.tokenizer->vocab_size(),
                "shard " + shard->path() + " has vocabulary " + std::to_string(shard->vocab_size()) +
                    " but tokenizer.bin has " + std::to_string(dataset.tokenizer->vocab_size()) +
                    " (files from different runs)" + fix);
    }
    return dataset;
}

}  // namespace dqt
