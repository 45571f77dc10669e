#include <unistd.h>

#include <cstdio>
#include <filesystem>

#include "commands.h"
#include "core/error.h"
#include "core/parallel.h"
#include "data/dataset.h"
#include "data_parallel/comm.h"
#include "infer/generate.h"
#include "model_files.h"
#include "train/dqt_recipe.h"
#include "train/model_checkpoint.h"
#include "train/trainer.h"

namespace dqt::cli {

namespace {

struct TrainArgs {
    TrainOptions options;
    ModelConfig model_flags;
    MethodFlags method_flags;
    std::string config_path;
    int threads = 0;
    bool resume = false;
    int stop_after = 0;
    int code_stats_every = 0;
    bool overwrite = false;
    bool async_checkpoint = false;
    std::string on_nonfinite = "stop";
    bool no_sample = false;
    bool quiet = false;
    std::string sample_prompt = "The state of the Union";
};

constexpr const char* kDefaultCorpus = "data/sotu";

// The built-in default: the dataset folder is made from the fetched default corpus on first use.
void prepare_default_dataset(const TrainOptions& options) {
    const TrainOptions defaults;
    if (options.data_dir != defaults.data_dir || std::filesystem::exists(options.data_dir)) return;
    require(std::filesystem::exists(kDefaultCorpus),
            "no dataset at " + options.data_dir + " and no default corpus at " + std::string(kDefaultCorpus) +
                ": run scripts/fetch_corpus.sh, or pass --data DIR made by `dqt data`");
    std::fprintf(stderr, "preparing %s from %s (byte tokenizer)\n", options.data_dir.c_str(), kDefaultCorpus);
    prepare_dataset(kDefaultCorpus, options.data_dir, "byte", 0);
}

// --init-from: the model file's weights and tokenizer; the run takes its shape (all but the
// context length, which is a training choice), so shape flags are refused.
InitialModel load_initial_model(const CLI::App& command, TrainArgs& args) {
    for (const char* flag : {"--config", "--dim", "--layers", "--heads", "--kv-heads", "--ffn", "--ffn-act",
                             "--vocab-size", "--no-subln", "--rope-theta", "--init-std", "--tie-embeddings"}) {
        // (--untie-embeddings is the negation of --tie-embeddings: one option, counted under that name)
        const std::string name = std::string(flag) == "--tie-embeddings" ? "--tie-embeddings/--untie-embeddings" : flag;
        require(command.count(flag) == 0, name +
                                              " cannot be combined with --init-from: the model's shape is the "
                                              "initial model's (only --seq-len may change)");
    }
    ModelFile file = load_model_file(args.options.init_from);
    ModelConfig shape = file.model->config;
    if (command.count("--seq-len") > 0) shape.seq_len = args.model_flags.seq_len;
    args.options.model = shape;
    args.options.special_tokens = file.special;  // kept in the checkpoint, written again by export
    return {std::move(file.model), std::move(file.tokenizer)};
}

void run(CLI::App& command, TrainArgs& args) {
    set_num_threads(args.threads);
    InitialModel init;
    if (args.resume) {
        // The checkpoint holds the run's settings; a changed flag would silently break exactness.
        for (const CLI::Option* option : command.get_options()) {
            const std::string name = option->get_name();
            const bool allowed = name == "--out" || name == "--threads" || name == "--resume" ||
                                 name == "--stop-after" || name == "--no-sample" || name == "--quiet" ||
                                 name == "--code-stats-every" || name == "--on-nonfinite" ||
                                 name == "--async-checkpoint" || name == "--device" || name == "--recompute" ||
                                 name == "--prompt" || name == "--help";
            require(allowed || option->count() == 0,
                    name + " cannot be combined with --resume: the run continues with the settings in its checkpoint");
        }
    } else {
        ModelConfig defaults;
        defaults.vocab_size = 0;  // 0: take the dataset tokenizer's vocabulary
        args.options.model = resolve_model_config(command, args.model_flags, args.config_path, defaults);
        if (!args.options.init_from.empty()) init = load_initial_model(command, args);
        args.options.method = resolve_method_config(command, args.method_flags);
        apply_dqt_recipe_optimizer(parse_dqt_recipe(args.method_flags.recipe), explicit_settings(command),
                                   args.options);
        args.options.optim_state = resolve_optim_state(args.method_flags);
        require(args.code_stats_every == 0 || args.options.method.kind != Method::fp,
                "--code-stats-every measures quantized weights, and an fp model has none (use --method bitnet or dqt)");
        // Under mpirun, each rank runs one micro-batch unless told otherwise: the global batch
        // grows with the ranks (give --grad-accum to keep it fixed).
        if (command.get_option("--grad-accum")->count() == 0) args.options.grad_accum = world().size();
        // Under mpirun, one rank prepares the dataset while the others wait for it.
        if (world().is_root()) prepare_default_dataset(args.options);
        world().barrier();
    }
    RunControl control;
    control.resume = args.resume;
    control.stop_after_step = args.stop_after;
    control.code_stats_every = args.code_stats_every;
    control.overwrite = args.overwrite;
    control.async_checkpoint = args.async_checkpoint;
    require(args.on_nonfinite == "stop" || args.on_nonfinite == "skip",
            "unknown --on-nonfinite '" + args.on_nonfinite + "': use stop or skip");
    control.on_nonfinite = args.on_nonfinite == "skip" ? RunControl::NonFinite::skip : RunControl::NonFinite::stop;
    control.interactive = isatty(STDERR_FILENO) == 1;
    control.quiet = args.quiet;
    const TrainReport report = run_training(args.options, control, std::move(init));

    if (args.no_sample || report.steps_done < args.options.steps || !world().is_root()) return;
    const LoadedModel loaded = load_model_checkpoint(report.checkpoint_path);
    SamplingOptions sampling;
    std::printf("\nsample (temperature %.1f, top-k %d) from \"%s\":\n", sampling.temperature, sampling.top_k,
                args.sample_prompt.c_str());
    const InferenceModel model(*loaded.model);
    generate_text(model, *loaded.tokenizer, SpecialTokens{}, args.sample_prompt, 200, sampling, KvCacheType::f32,
                  [](const std::string& piece) {
                      std::fputs(piece.c_str(), stdout);
                      std::fflush(stdout);
                  });
    std::printf("\n");
}

}  // namespace

void add_train_command(CLI::App& app) {
    auto args = std::make_shared<TrainArgs>();
    CLI::App* command = app.add_subcommand("train", "train a model (defaults: SOTU corpus, dim 256, 4 layers)");
    TrainOptions& o = args->options;
    command->add_option("--data", o.data_dir, "dataset folder made by `dqt data`")->capture_default_str();
    command->add_option("--out", o.out_dir, "run folder: checkpoint, metrics.jsonl, config.json")->capture_default_str();
    add_model_flags(*command, args->model_flags, args->config_path);
    add_method_flags(*command, args->method_flags);
    command->add_option("--steps", o.steps, "optimizer steps")->capture_default_str();
    command->add_option("--batch", o.batch, "sequences per micro-batch")->capture_default_str();
    command->add_option("--grad-accum", o.grad_accum,
                        "micro-batches per step, a multiple of the rank count under mpirun (default: 1 per rank)");
    command->add_option("--lr", o.lr, "peak learning rate (dqt: default from --dqt-recipe)")->capture_default_str();
    command->add_option("--min-lr-ratio", o.min_lr_ratio,
                        "final LR as a fraction of the peak (dqt: default from --dqt-recipe)")
        ->capture_default_str();
    command->add_option("--warmup", o.warmup_steps, "linear warm-up steps")->capture_default_str();
    command->add_option("--beta1", o.adam.beta1, "Adam beta1 (dqt: default from --dqt-recipe)")->capture_default_str();
    command->add_option("--beta2", o.adam.beta2, "Adam beta2")->capture_default_str();
    command->add_option("--adam-eps", o.adam.eps, "Adam epsilon")->capture_default_str();
    command->add_option("--weight-decay", o.adam.weight_decay, "decoupled weight decay")->capture_default_str();
    command->add_option("--grad-clip", o.grad_clip, "global gradient-norm clip (0 = off)")->capture_default_str();
    command
        ->add_option_function<std::string>(
            "--device", [&o](const std::string& name) { o.device = parse_train_device(name); },
            "where the training step runs: cpu, or cuda (a GPU, in a build with cmake -DDQT_CUDA=ON; evaluation and "
            "checkpoints stay on the CPU, and a run resumes on either device)")
        ->check(CLI::IsMember({"cpu", "cuda"}));
    command->add_flag("--recompute", o.recompute,
                      "with --device cuda: save each layer's input only and recompute the layer in the backward, "
                      "and compute the head's logits in chunks (one layer's activations in GPU memory instead of "
                      "all, for about a third more compute)");
    command->add_flag("--fused-update", o.fused_update,
                      "update each weight as soon as its gradient is ready: no whole-model gradient buffer "
                      "(clips with the previous step's norm; needs --grad-accum 1)");
    command->add_option("--compress-gradients", o.compression.gradient_bits,
                        "under mpirun, send gradients block-quantized to 8 or 4 bits with error feedback "
                        "(default: fp32)")
        ->check(CLI::IsMember({8, 4}));
    command->add_option("--compress-weights", o.compression.weight_bits,
                        "under mpirun, all-gather new fp32 weights as 8- or 4-bit block-quantized differences "
                        "(fp and bitnet; default: fp32)")
        ->check(CLI::IsMember({8, 4}));
    command->add_option("--eval-every", o.eval_every, "steps between evaluations (0 = end only)")->capture_default_str();
    command->add_option("--eval-tokens", o.eval_tokens, "validation tokens per evaluation")->capture_default_str();
    command->add_option("--log-every", o.log_every, "steps between metric lines")->capture_default_str();
    command->add_option("--checkpoint-every", o.checkpoint_every, "steps between checkpoints (0 = end only)")
        ->capture_default_str();
    command->add_flag("--async-checkpoint", args->async_checkpoint,
                      "write checkpoints on a background thread: training pauses only to copy the state "
                      "(memory: one more copy of the checkpoint, about its file size)");
    command->add_option("--seed", o.seed, "seed of initialisation and data order")
        ->check(seed_number())
        ->capture_default_str();
    command->add_option("--init-from", o.init_from,
                        "start from a trained model's weights (a checkpoint, a GGUF file or a Hugging Face "
                        "folder) in this run's method: ternary codes by TWN (absmean from bitnet), n-bit codes "
                        "by the largest scale that clips none; the run takes its shape and its tokenizer must "
                        "be the dataset's")
        ->check(CLI::ExistingPath);
    add_threads_flag(*command, args->threads);
    command->add_flag("--resume", args->resume, "continue the run in --out from its checkpoint");
    command->add_flag("--overwrite", args->overwrite, "start a new run in an --out that holds one (its checkpoint is replaced)")
        ->excludes("--resume");
    command->add_option("--stop-after", args->stop_after, "checkpoint and stop after this step (resume later)")
        ->check(positive_whole_number());
    command->add_option("--code-stats-every", args->code_stats_every,
                        "every N steps, log how the quantized weights' codes move (metrics.jsonl, type \"codes\"; "
                        "holds two int8 copies of them)")
        ->check(positive_whole_number());
    command->add_option("--on-nonfinite", args->on_nonfinite,
                        "a step with a non-finite loss or gradient: stop (keep the last checkpoint) or skip it")
        ->capture_default_str();
    command->add_flag("--no-sample", args->no_sample, "do not print a generated sample at the end");
    command->add_option("--prompt", args->sample_prompt, "prompt of the sample printed at the end")->capture_default_str();
    command->add_flag("--quiet", args->quiet, "no progress output");
    command->callback([command, args] { run(*command, *args); });
}

}  // namespace dqt::cli
