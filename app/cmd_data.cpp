#include <cstdio>

#include "commands.h"
#include "core/parallel.h"
#include "data/dataset.h"

namespace dqt::cli {

namespace {
struct DataArgs {
    std::string corpus = "data/sotu";
    std::string out;
    std::string tokenizer = "byte";
    int vocab = 4096;
    int threads = 0;
};
}  // namespace

void add_data_command(CLI::App& app) {
    auto args = std::make_shared<DataArgs>();
    CLI::App* command = app.add_subcommand("data", "tokenize a corpus into train/val shards");
    command->add_option("--corpus", args->corpus, "UTF-8 text file or folder of .txt files")->capture_default_str();
    command->add_option("--out", args->out, "dataset folder (default: <corpus>-byte or <corpus>-bpe<vocab>)");
    command->add_option("--tokenizer", args->tokenizer, "byte (vocab 256) or bpe (sentencepiece, trained here)")
        ->check(CLI::IsMember({"byte", "bpe"}))
        ->capture_default_str();
    command->add_option("--vocab", args->vocab, "BPE vocabulary size")->check(CLI::Range(260, 65536))->capture_default_str();
    add_threads_flag(*command, args->threads);
    command->callback([args] {
        set_num_threads(args->threads);
        std::string out = args->out;
        if (out.empty()) {
            std::string base = args->corpus;
            while (base.size() > 1 && base.back() == '/') base.pop_back();
            out = base + (args->tokenizer == "byte" ? "-byte" : "-bpe" + std::to_string(args->vocab));
        }
        prepare_dataset(args->corpus, out, args->tokenizer, args->vocab);
        std::printf("dataset written to %s\n", out.c_str());
    });
}

}  // namespace dqt::cli
