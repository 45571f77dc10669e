#include <cstdio>
#include <filesystem>
#include <map>

#include "commands.h"
#include "model_files.h"
#include "core/error.h"
#include "export/gguf_model.h"
#include "export/hf_export.h"
#include "model/ternary_convert.h"

namespace dqt::cli {

namespace {
struct ExportArgs {
    std::string checkpoint;
    std::string out;
    std::string format = "gguf";
    std::string ternary_type = "tq2_0";
    std::string float_type = "f32";
    bool ternary = false;
    std::string ternary_rule = "absmean";
};

// The model to export: --ternary re-snaps an n-bit model first.
std::unique_ptr<ModelParameters> ternary_version(const ModelFile& loaded, const ExportArgs& args) {
    if (!args.ternary) return nullptr;
    return convert_to_ternary(*loaded.model, parse_ternary_rule(args.ternary_rule));
}

std::string default_out(const std::string& model_path, const std::string& name) {
    const std::filesystem::path path(model_path);
    // A Hugging Face folder's export goes beside it, not into it.
    const std::filesystem::path folder = std::filesystem::is_directory(path) ? path.lexically_normal().parent_path()
                                                                             : path.parent_path();
    return (folder / name).string();
}

void export_safetensors(const ExportArgs& args) {
    const std::string out = args.out.empty() ? default_out(args.checkpoint, "hf") : args.out;
    std::error_code ignored;
    require(!std::filesystem::equivalent(args.checkpoint, out, ignored),
            "--out " + out + " is the input itself: export writes a new folder, choose another name");
    const ModelFile loaded = load_model_file(args.checkpoint);
    const std::unique_ptr<ModelParameters> ternary = ternary_version(loaded, args);
    const ModelParameters& model = ternary ? *ternary : *loaded.model;
    const HfExportSummary summary = export_hf_folder(model, *loaded.tokenizer, loaded.special, out);
    std::printf("wrote %s: Hugging Face %s (%s), %zu tensors in model.safetensors, %.2f MiB\n", out.c_str(),
                summary.architecture.c_str(), model.method.label().c_str(), summary.tensors,
                static_cast<double>(summary.bytes) / (1024.0 * 1024.0));
}

}  // namespace

void add_export_command(CLI::App& app) {
    auto args = std::make_shared<ExportArgs>();
    CLI::App* command = app.add_subcommand(
        "export", "write a model as a GGUF file that llama.cpp runs, or as a Hugging Face folder (safetensors)");
    command->add_option("checkpoint,--checkpoint", args->checkpoint,
                        "the model: a checkpoint (runs/NAME/checkpoint.dqt), a GGUF file or a Hugging Face folder")
        ->required();
    command->add_option("--out", args->out,
                        "output file or folder (default: beside the checkpoint, model.gguf or the folder hf)");
    command->add_option("--format", args->format, "output format: gguf or safetensors")->capture_default_str();
    command->add_option("--ternary-type", args->ternary_type, "GGUF type of ternary weights: tq2_0 or tq1_0")
        ->capture_default_str();
    command->add_option("--float-type", args->float_type, "GGUF type of fp32 matrices: f32 or f16")->capture_default_str();
    command->add_flag("--ternary", args->ternary, "re-snap an n-bit model's quantized weights to ternary first");
    add_ternary_rule_flag(*command, args->ternary_rule);
    command->callback([args, command] {
        require(args->format == "gguf" || args->format == "safetensors",
                "unknown --format '" + args->format + "': use gguf or safetensors");
        if (args->format == "safetensors") {
            for (const char* flag : {"--ternary-type", "--float-type"})
                require(command->count(flag) == 0, std::string(flag) + " applies to --format gguf only: safetensors "
                                                                        "holds fp32 values and int8 codes");
            export_safetensors(*args);
            return;
        }
        const std::map<std::string, GgufTernaryFormat> ternary_types = {{"tq2_0", GgufTernaryFormat::tq2_0},
                                                                         {"tq1_0", GgufTernaryFormat::tq1_0}};
        const std::map<std::string, GgufFloatFormat> float_types = {{"f32", GgufFloatFormat::f32},
                                                                    {"f16", GgufFloatFormat::f16}};
        require(ternary_types.count(args->ternary_type) == 1,
                "unknown --ternary-type '" + args->ternary_type + "': use tq2_0 or tq1_0");
        require(float_types.count(args->float_type) == 1, "unknown --float-type '" + args->float_type + "': use f32 or f16");
        GgufExportOptions options;
        options.ternary = ternary_types.at(args->ternary_type);
        options.floats = float_types.at(args->float_type);

        const std::string out = args->out.empty() ? default_out(args->checkpoint, "model.gguf") : args->out;
        std::error_code ignored;  // a missing output is fine; only the same file is refused
        require(!std::filesystem::equivalent(args->checkpoint, out, ignored),
                "--out " + out + " is the input file itself: export writes a new file, choose another name");
        const ModelFile loaded = load_model_file(args->checkpoint);
        options.data_dir = loaded.data_dir;
        options.special = loaded.special;
        const std::unique_ptr<ModelParameters> ternary = ternary_version(loaded, *args);
        const ModelParameters& model = ternary ? *ternary : *loaded.model;
        const GgufExportSummary summary = export_gguf(model, *loaded.tokenizer, options, out);
        std::map<std::string, int> type_counts;
        for (GgmlType type : summary.tensor_types) ++type_counts[ggml_type_name(type)];
        std::string types;
        for (const auto& [type, count] : type_counts) types += (types.empty() ? "" : ", ") + std::to_string(count) + " " + type;
        std::printf("wrote %s: llama.cpp architecture '%s', %zu tensors (%s), %.2f MiB\n", out.c_str(),
                    summary.architecture.c_str(), summary.tensor_types.size(), types.c_str(),
                    static_cast<double>(std::filesystem::file_size(out)) / (1024.0 * 1024.0));
        if (summary.ternary_fallbacks > 0)
            std::printf("note: %d ternary tensors have rows that are not a multiple of 256 elements and were written as "
                        "F32 codes (choose dims that are multiples of 256 for TQ2_0/TQ1_0 throughout)\n",
                        summary.ternary_fallbacks);
    });
}

}  // namespace dqt::cli
