#include <cstdio>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "core/error.h"
#include "core/parallel.h"
#include "data/dataset.h"
#include "model/llama.h"
#include "train/evaluate.h"
#include "train/model_checkpoint.h"

namespace dqt::cli {

namespace {
struct EvalArgs {
    std::string checkpoint;
    std::string data;  // default: the run's dataset
    int64_t tokens = 262144;
    int batch = 8;
    int threads = 0;
    bool json = false;
};
}  // namespace

void add_eval_command(CLI::App& app) {
    auto args = std::make_shared<EvalArgs>();
    CLI::App* command = app.add_subcommand("eval", "validation loss of a checkpoint");
    command->add_option("checkpoint,--checkpoint", args->checkpoint, "checkpoint file (runs/NAME/checkpoint.dqt)")
        ->required();
    command->add_option("--data", args->data, "dataset folder (default: the one the run trained on)");
    command->add_option("--eval-tokens", args->tokens, "validation tokens to score")->capture_default_str();
    command->add_option("--batch", args->batch, "windows per forward pass")->check(CLI::PositiveNumber)->capture_default_str();
    add_threads_flag(*command, args->threads);
    command->add_flag("--json", args->json, "print one JSON object instead of text");
    command->callback([args] {
        set_num_threads(args->threads);
        require(args->tokens > 0, "--eval-tokens must be positive");
        const LoadedModel loaded = load_model_checkpoint(args->checkpoint);
        const std::string data_dir = args->data.empty() ? loaded.options.data_dir : args->data;
        const Dataset data = open_dataset(data_dir);
        require(data.tokenizer->vocab_size() == loaded.model->config.vocab_size,
                "dataset " + data_dir + " uses a different tokenizer than the checkpoint");
        Activations acts(loaded.model->config, args->batch, loaded.model->config.seq_len);
        const EvalResult result = evaluate(*loaded.model, acts, data.val, args->tokens);
        if (args->json) {
            std::printf("%s\n", nlohmann::json{{"checkpoint", args->checkpoint}, {"step", loaded.step},
                                               {"val_loss", result.loss}, {"val_bits_per_byte", result.bits_per_byte},
                                               {"val_tokens", result.tokens}}
                                    .dump()
                                    .c_str());
        } else {
            std::printf("%s (step %d): val loss %.4f nats/token, %.4f bits/byte over %lld tokens\n",
                        args->checkpoint.c_str(), loaded.step, result.loss, result.bits_per_byte,
                        static_cast<long long>(result.tokens));
        }
    });
}

}  // namespace dqt::cli
