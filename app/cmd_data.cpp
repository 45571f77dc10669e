#include <cstdio>

#include "commands.h"
#include "core/error.h"
#include "core/parallel.h"
#include "data/dataset.h"
#include "model_files.h"

namespace dqt::cli {

namespace {
struct DataArgs {
    std::string corpus = "data/sotu";
    std::string out;
    std::string tokenizer = "byte";
    std::string tokenizer_from;
    int vocab = 4096;
    int threads = 0;
    CorpusOptions corpus_options;
};
}  // namespace

void add_data_command(CLI::App& app) {
    auto args = std::make_shared<DataArgs>();
    CLI::App* command = app.add_subcommand("data", "tokenize a corpus into train/val shards");
    command->add_option("--corpus", args->corpus,
                        "UTF-8 text file, JSON Lines file (*.jsonl, a {\"text\": ...} object a line) or folder of "
                        "them (*.txt, *.jsonl)")
        ->capture_default_str();
    command->add_option("--text-key", args->corpus_options.text_key, "the key of each JSON Lines record's text")
        ->capture_default_str();
    command->add_option("--val-fraction", args->corpus_options.val_fraction,
                        "share of the documents held out for validation, spread evenly over the corpus")
        ->check(CLI::Range(1e-6, 0.5))
        ->capture_default_str();
    command->add_option("--val-corpus", args->corpus_options.val_corpus,
                        "validate on this file or folder instead, and train on every document of --corpus")
        ->check(CLI::ExistingPath)
        ->excludes("--val-fraction");
    command->add_option("--out", args->out, "dataset folder (default: <corpus>-byte or <corpus>-bpe<vocab>)");
    command->add_option("--tokenizer", args->tokenizer, "byte (vocab 256) or bpe (sentencepiece, trained here)")
        ->check(CLI::IsMember({"byte", "bpe"}))
        ->capture_default_str();
    command->add_option("--vocab", args->vocab, "BPE vocabulary size")->check(CLI::Range(260, 262144))->capture_default_str();
    command->add_option("--tokenizer-from", args->tokenizer_from,
                        "tokenize with an existing tokenizer: a dataset folder, a checkpoint, a GGUF file or a Hugging Face folder "
                        "(a model's, to evaluate or fine-tune it on this corpus; needs --out)")
        ->check(CLI::ExistingPath)
        ->excludes("--tokenizer")
        ->excludes("--vocab");
    add_threads_flag(*command, args->threads);
    command->callback([args] {
        set_num_threads(args->threads);
        if (!args->tokenizer_from.empty()) {
            require(!args->out.empty(), "--tokenizer-from needs --out: name the dataset folder to write");
            const std::unique_ptr<Tokenizer> tokenizer = load_tokenizer_from(args->tokenizer_from);
            prepare_dataset(args->corpus, args->out, "", 0, tokenizer.get(), args->corpus_options);
            std::printf("dataset written to %s (the %s tokenizer of %s, %d tokens)\n", args->out.c_str(),
                        tokenizer->kind().c_str(), args->tokenizer_from.c_str(), tokenizer->vocab_size());
            return;
        }
        std::string out = args->out;
        if (out.empty()) {
            std::string base = args->corpus;
            while (base.size() > 1 && base.back() == '/') base.pop_back();
            out = base + (args->tokenizer == "byte" ? "-byte" : "-bpe" + std::to_string(args->vocab));
        }
        prepare_dataset(args->corpus, out, args->tokenizer, args->vocab, nullptr, args->corpus_options);
        std::printf("dataset written to %s\n", out.c_str());
    });
}

}  // namespace dqt::cli
