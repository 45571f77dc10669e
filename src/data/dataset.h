#pragma once
// A prepared dataset folder: train.bin and val.bin (token shards), tokenizer.bin and
// meta.json (a human-readable summary), made by prepare_dataset and read by open_dataset.
#include <cstdint>
#include <memory>
#include <string>

#include "data/corpus.h"
#include "data/shard.h"
#include "data/tokenizer.h"

namespace dqt {

// Documents within a split are joined with this text before tokenizing; each document is
// encoded on its own (in parallel) and the separator's tokens go between them.
inline constexpr const char* kDocumentSeparator = "\n\n";

struct SplitInfo {
    int64_t documents = 0;
    int64_t tokens = 0;
    int64_t bytes = 0;  // UTF-8 bytes of the joined text
};

struct DatasetInfo {
    std::string tokenizer_kind;
    int vocab_size = 0;
    SplitInfo train, val;
};

// How a corpus becomes documents and splits (data/corpus.h).
struct CorpusOptions {
    std::string text_key = "text";             // of JSON Lines records
    double val_fraction = kDefaultValFraction;  // split_corpus's f
    std::string val_corpus;  // when set: every document of the corpus trains, this one validates
};

// Reads the corpus (see read_corpus, split_corpus), builds the tokenizer ("byte", or "bpe"
// trained on the training documents only, with bpe_vocab tokens), and writes the four files
// into out_dir (created if needed), each atomically. Uses num_threads() threads.
// `existing`: tokenize with this tokenizer instead (a model's, to evaluate or fine-tune it on
// another corpus); tokenizer_kind and bpe_vocab are then not used.
DatasetInfo prepare_dataset(const std::string& corpus_path, const std::string& out_dir,
                            const std::string& tokenizer_kind, int bpe_vocab, const Tokenizer* existing = nullptr,
                            const CorpusOptions& corpus = {});

struct Dataset {
    std::unique_ptr<Tokenizer> tokenizer;
    Shard train;
    Shard val;
};

// Opens and validates a dataset folder; dqt::Error names the missing or bad file and the fix.
Dataset open_dataset(const std::string& dir);

}  // namespace dqt
