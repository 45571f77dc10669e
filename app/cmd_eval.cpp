#include <cstdio>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "model_files.h"
#include "core/error.h"
#include "core/parallel.h"
#include "data/dataset.h"
#include "infer/evaluate.h"
#include "model/ternary_convert.h"

namespace dqt::cli {

namespace {

std::string loss_text(const EvalResult& result) {
    char text[160];
    std::snprintf(text, sizeof text, "val loss %.4f nats/token, %.4f bits/byte over %lld tokens", result.loss,
                  result.bits_per_byte, static_cast<long long>(result.tokens));
    return text;
}

struct EvalArgs {
    std::string checkpoint;
    std::string data;  // default: the run's dataset
    int64_t tokens = 262144;
    std::string kv_cache = "f32";
    int threads = 0;
    bool json = false;
    bool ternary = false;
};
}  // namespace

void add_eval_command(CLI::App& app) {
    auto args = std::make_shared<EvalArgs>();
    CLI::App* command = app.add_subcommand("eval", "validation loss of a checkpoint");
    command->add_option("checkpoint,--checkpoint", args->checkpoint, "checkpoint (runs/NAME/checkpoint.dqt), GGUF file or Hugging Face model folder (these two "
                       "need --data)")
        ->required();
    command->add_option("--data", args->data, "dataset folder (default: the one the run trained on)");
    command->add_option("--eval-tokens", args->tokens, "validation tokens to score")->capture_default_str();
    add_threads_flag(*command, args->threads);
    add_kv_cache_flag(*command, args->kv_cache);
    command->add_flag("--ternary", args->ternary,
                      "also score the model with its quantized weights re-snapped to ternary, by the absmean "
                      "and the twn rule");
    command->add_flag("--json", args->json, "print one JSON object instead of text");
    command->callback([args] {
        set_num_threads(args->threads);
        require(args->tokens > 0, "--eval-tokens must be positive");
        const KvCacheType cache = parse_kv_cache_type(args->kv_cache);
        ModelFile file;  // --ternary converts its parameters
        InferenceFile loaded;
        if (args->ternary) {
            file = load_model_file(args->checkpoint);
            loaded = inference_file_from(file);
        } else {
            loaded = load_inference_file(args->checkpoint);
        }
        const std::string data_dir = args->data.empty() ? loaded.data_dir : args->data;
        require(!data_dir.empty(), args->checkpoint + " names no dataset: pass --data DIR");
        const Dataset data = open_dataset(data_dir);
        require(same_tokenizer(*data.tokenizer, *loaded.tokenizer),
                "dataset " + data_dir + " uses a different tokenizer than " + args->checkpoint +
                    ": its loss would be meaningless (pass the dataset the model was trained on)");
        const int window = loaded.model->config.seq_len;
        const std::string method = loaded.model->method_label;
        const EvalResult result = evaluate(*loaded.model, data.val, window, args->tokens, cache);
        const std::string kernels = loaded.model->kernels_label();
        loaded.model.reset();
        nlohmann::json record = {{"checkpoint", args->checkpoint},
                                 {"step", loaded.step},
                                 {"method", method},
                                 {"val_loss", result.loss},
                                 {"val_bits_per_byte", result.bits_per_byte},
                                 {"val_tokens", result.tokens},
                                 {"kv_cache", args->kv_cache},
                                 {"kernels", kernels}};
        std::string text = args->checkpoint + " (step " + std::to_string(loaded.step) + ", " + method +
                           (cache == KvCacheType::f32 ? "" : ", " + args->kv_cache + " KV cache") +
                           "): " + loss_text(result);
        if (args->ternary) {
            for (TernaryRule rule : {TernaryRule::absmean, TernaryRule::twn}) {
                const std::unique_ptr<ModelParameters> ternary = convert_to_ternary(*file.model, rule);
                const InferenceModel ternary_model(*ternary);
                const EvalResult ternary_result = evaluate(ternary_model, data.val, window, args->tokens, cache);
                // "ternary_val_loss" is absmean's (the paper's rule), "ternary_twn_val_loss" twn's.
                const std::string prefix = rule == TernaryRule::absmean ? "ternary_" : "ternary_twn_";
                record[prefix + "val_loss"] = ternary_result.loss;
                record[prefix + "val_bits_per_byte"] = ternary_result.bits_per_byte;
                text += std::string("\n  with ternary weights (") + ternary_rule_name(rule) +
                        "): " + loss_text(ternary_result);
            }
        }
        if (args->json) {
            std::printf("%s\n", record.dump().c_str());
        } else {
            std::printf("%s\n", text.c_str());
        }
    });
}

}  // namespace dqt::cli
