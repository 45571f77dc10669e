#include <cstdio>

#include "commands.h"
#include "model_files.h"
#include "core/parallel.h"
#include "model/ternary_convert.h"
#include "infer/generate.h"
#include "infer/ternary_layout.h"

namespace dqt::cli {

namespace {
struct GenerateArgs {
    std::string checkpoint;
    std::string prompt = "The state of the Union";
    int tokens = 200;
    SamplingOptions sampling;
    int threads = 0;
    bool ternary = false;
    std::string ternary_rule = "absmean";
    std::string kv_cache = "f32";
    std::string ternary_layout = "auto";
    std::vector<std::string> stop;
};
}  // namespace

void add_generate_command(CLI::App& app) {
    auto args = std::make_shared<GenerateArgs>();
    CLI::App* command = app.add_subcommand("generate", "sample text from a checkpoint");
    command->add_option("checkpoint,--checkpoint", args->checkpoint, "checkpoint, GGUF file or Hugging Face model folder")->required();
    command->add_option("--prompt", args->prompt, "text to continue")->capture_default_str();
    command->add_option("--tokens", args->tokens, "new tokens to generate")->check(non_negative_whole_number())->capture_default_str();
    // Float ranges are checked by SamplingOptions::validate(): CLI11's own range message prints
    // the largest double in full.
    command->add_option("--temperature", args->sampling.temperature, "softmax temperature (0 = greedy)")
        ->capture_default_str();
    command->add_option("--top-k", args->sampling.top_k, "sample among the k likeliest (0 = all)")
        ->check(non_negative_whole_number())
        ->capture_default_str();
    command->add_option("--top-p", args->sampling.top_p, "nucleus: smallest set with this mass")
        ->capture_default_str();
    command->add_option("--seed", args->sampling.seed, "sampling seed")->check(seed_number())->capture_default_str();
    command->add_option("--stop", args->stop, "end the text before this string (repeatable)")
        ->allow_extra_args(false)
        ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
    command->add_flag("--ternary", args->ternary, "run with the quantized weights re-snapped to ternary");
    add_ternary_rule_flag(*command, args->ternary_rule);
    add_kv_cache_flag(*command, args->kv_cache);
    add_ternary_layout_flag(*command, args->ternary_layout);
    add_threads_flag(*command, args->threads);
    command->callback([args] {
        args->sampling.validate();
        set_num_threads(args->threads);
        InferenceFile loaded;
        if (args->ternary) {
            ModelFile file = load_model_file(args->checkpoint);
            file.model = convert_to_ternary(*file.model, parse_ternary_rule(args->ternary_rule));
            loaded = inference_file_from(file);
        } else {
            loaded = load_inference_file(args->checkpoint);
        }
        hold_ternary_layout(*loaded.model, parse_ternary_layout(args->ternary_layout), {1},
                            parse_kv_cache_type(args->kv_cache));
        const InferenceModel& model = *loaded.model;
        const GenerationResult result =
            generate_text(model, *loaded.tokenizer, loaded.special, args->prompt, args->tokens, args->sampling,
                          parse_kv_cache_type(args->kv_cache),
                          [](const std::string& piece) {
                              std::fputs(piece.c_str(), stdout);
                              std::fflush(stdout);
                          },
                          args->stop);
        std::printf("\n");
        if (result.tokens_per_second > 0) {
            std::fprintf(stderr, "%d prompt tokens, %d generated at %.1f tokens/s (kernels: %s)\n",
                         result.prompt_tokens, result.generated_tokens, result.tokens_per_second,
                         model.kernels_label().c_str());
        } else {  // at most one new token, from the prompt's logits: no decode pass to time
            std::fprintf(stderr, "%d prompt tokens, %d generated (kernels: %s)\n", result.prompt_tokens,
                         result.generated_tokens, model.kernels_label().c_str());
        }
        if (result.finish_reason == FinishReason::context)
            std::fprintf(stderr, "stopped at the model's context of %d tokens, before the %d asked for with --tokens\n",
                         model.config.seq_len, args->tokens);
    });
}

}  // namespace dqt::cli
