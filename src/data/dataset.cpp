#include "data/dataset.h"

#include <algorithm>
#include <exception>
#include <filesystem>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/parallel.h"
#include "data/corpus.h"
#include "io/atomic_file.h"

namespace dqt {
namespace fs = std::filesystem;

namespace {

// Tokens of texts joined by kDocumentSeparator. Documents are encoded in parallel; the
// result does not depend on the thread count.
std::vector<int32_t> encode_joined(const Tokenizer& tokenizer, const std::vector<std::string>& texts) {
    std::vector<std::vector<int32_t>> encoded(texts.size());
    std::exception_ptr failure;
#pragma omp parallel for schedule(dynamic)
    for (size_t i = 0; i < texts.size(); ++i) {
        try {
            encoded[i] = tokenizer.encode(texts[i]);
        } catch (...) {
#pragma omp critical
            failure = std::current_exception();
        }
    }
    if (failure) std::rethrow_exception(failure);
    const std::vector<int32_t> separator = tokenizer.encode(kDocumentSeparator);
    std::vector<int32_t> tokens;
    for (size_t i = 0; i < encoded.size(); ++i) {
        if (i > 0) tokens.insert(tokens.end(), separator.begin(), separator.end());
        tokens.insert(tokens.end(), encoded[i].begin(), encoded[i].end());
    }
    return tokens;
}

SplitInfo write_split(const std::string& path, const Tokenizer& tokenizer, const std::vector<std::string>& texts) {
    SplitInfo info;
    info.documents = static_cast<int64_t>(texts.size());
    for (const std::string& text : texts) info.bytes += static_cast<int64_t>(text.size());
    if (!texts.empty()) {
        info.bytes += static_cast<int64_t>((texts.size() - 1) * std::string_view(kDocumentSeparator).size());
    }
    const std::vector<int32_t> tokens = encode_joined(tokenizer, texts);
    info.tokens = static_cast<int64_t>(tokens.size());
    write_shard(path, tokens, tokenizer.vocab_size(), static_cast<uint64_t>(info.bytes));
    return info;
}

nlohmann::json split_json(const SplitInfo& info) {
    return {{"documents", info.documents}, {"tokens", info.tokens}, {"bytes", info.bytes}};
}

std::vector<std::string> take_texts(std::vector<Document>& documents) {
    std::vector<std::string> texts;
    for (Document& document : documents) texts.push_back(std::move(document.text));
    return texts;
}

}  // namespace

DatasetInfo prepare_dataset(const std::string& corpus_path, const std::string& out_dir,
                            const std::string& tokenizer_kind, int bpe_vocab, const Tokenizer* existing,
                            const CorpusOptions& corpus) {
    require(existing || tokenizer_kind == "byte" || tokenizer_kind == "bpe",
            "unknown tokenizer '" + tokenizer_kind + "': use byte or bpe");
    const bool named_val = !corpus.val_corpus.empty();
    CorpusSplit split;
    if (named_val) {
        split.train = read_corpus(corpus_path, corpus.text_key, false);
        split.val = read_corpus(corpus.val_corpus, corpus.text_key, false);
    } else {
        split = split_corpus(read_corpus(corpus_path, corpus.text_key), corpus.val_fraction);
    }
    const bool val_has_text =
        std::any_of(split.val.begin(), split.val.end(), [](const Document& d) { return !d.text.empty(); });
    require(val_has_text, named_val ? "validation corpus " + corpus.val_corpus + " holds no text"
                                    : "corpus " + corpus_path + " leaves no text for validation (" +
                                          split_rule(corpus.val_fraction) +
                                          "; a corpus of fewer than 10 documents is cut in tenths first): give it more "
                                          "text or a larger --val-fraction");
    const std::vector<std::string> train_texts = take_texts(split.train);
    const std::vector<std::string> val_texts = take_texts(split.val);

    std::unique_ptr<Tokenizer> made;
    if (!existing) {
        made = tokenizer_kind == "bpe" ? train_bpe_tokenizer(train_texts, bpe_vocab, num_threads()) : make_byte_tokenizer();
    }
    const Tokenizer* tokenizer = existing ? existing : made.get();

    std::error_code ec;
    fs::create_directories(out_dir, ec);
    require(fs::is_directory(out_dir),
            "cannot create dataset folder " + out_dir + " (" + ec.message() + "): check the path and its permissions");
    DatasetInfo info;
    info.tokenizer_kind = tokenizer->kind();
    info.vocab_size = tokenizer->vocab_size();
    info.train = write_split(out_dir + "/train.bin", *tokenizer, train_texts);
    info.val = write_split(out_dir + "/val.bin", *tokenizer, val_texts);
    save_tokenizer_file(out_dir + "/tokenizer.bin", *tokenizer);

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
    const std::string text = meta.dump(2) + "\n";
    write_file_atomic(out_dir + "/meta.json", text);
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
