#include "model_files.h"

#include <filesystem>
#include <utility>

#include "core/error.h"

#include "export/gguf_model.h"
#include "export/hf_import.h"
#include "io/gguf.h"
#include "train/model_checkpoint.h"

namespace dqt::cli {

namespace {

// What is neither a GGUF file nor a Hugging Face folder is read as a checkpoint; a missing path
// or another folder would be refused in a checkpoint's words ("cannot open checkpoint file
// model.gguf", "not a regular file"), so they are named here. Errors other than "no such
// file" (a folder it may not enter) stay the reader's, with their errno.
void refuse_missing_path_or_other_folder(const std::string& path) {
    constexpr const char* kModelKinds =
        "give a checkpoint, a GGUF file or a Hugging Face model folder (config.json, *.safetensors and its tokenizer)";
    std::error_code error;
    require(std::filesystem::exists(path, error) || error, path + " not found: " + kModelKinds);
    require(!std::filesystem::is_directory(path, error), path + " is a folder without config.json: " + kModelKinds);
}

}  // namespace

std::unique_ptr<Tokenizer> load_tokenizer_from(const std::string& path) {
    if (is_hf_folder(path)) return import_hf_tokenizer(path);
    if (std::filesystem::is_directory(path)) {
        const std::string file = path + "/tokenizer.bin";
        require(std::filesystem::exists(file), path + " is a folder without tokenizer.bin: give a dataset folder made by "
                                                   "`dqt data`, a checkpoint or a GGUF file");
        return load_tokenizer_file(file);
    }
    if (is_gguf_file(path)) return open_gguf(path).tokenizer;
    return read_checkpoint_run(path).tokenizer;
}

ModelFile load_model_file(const std::string& path) {
    if (is_hf_folder(path)) {
        ImportedHf imported = import_hf_folder(path);
        return {std::move(imported.model), std::move(imported.tokenizer), "", 0, std::move(imported.special)};
    }
    if (is_gguf_file(path)) {
        ImportedGguf imported = import_gguf(path);
        return {std::move(imported.model), std::move(imported.tokenizer), imported.data_dir, 0,
                std::move(imported.special)};
    }
    refuse_missing_path_or_other_folder(path);
    LoadedModel loaded = load_model_checkpoint(path);
    return {std::move(loaded.model), std::move(loaded.tokenizer), loaded.options.data_dir, loaded.step,
            loaded.options.special_tokens};
}

InferenceFile load_inference_file(const std::string& path) {
    if (is_gguf_file(path)) {
        OpenedGguf opened = open_gguf(path);
        return {std::make_unique<InferenceModel>(*opened.tensors), std::move(opened.tokenizer), opened.data_dir, 0,
                std::move(opened.special)};
    }
    if (!is_hf_folder(path)) {
        refuse_missing_path_or_other_folder(path);
        OpenedCheckpoint opened = open_model_checkpoint(path);
        return {std::make_unique<InferenceModel>(*opened.tensors), std::move(opened.tokenizer), opened.options.data_dir,
                opened.step, opened.options.special_tokens};
    }
    ModelFile file = load_model_file(path);
    return inference_file_from(file);
}

InferenceFile inference_file_from(ModelFile& file) {
    return {std::make_unique<InferenceModel>(*file.model), std::move(file.tokenizer), file.data_dir, file.step,
            std::move(file.special)};
}

}  // namespace dqt::cli
