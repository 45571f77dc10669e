#pragma once
// The model file a command is given: a training checkpoint (train/), a GGUF file (export/) or a
// Hugging Face folder. Only app/ sees all those folders, so the choice is made here.
#include <memory>
#include <string>

#include "data/special_tokens.h"
#include "data/tokenizer.h"
#include "infer/inference_model.h"
#include "model/parameters.h"

namespace dqt::cli {

struct ModelFile {
    std::unique_ptr<ModelParameters> model;
    std::unique_ptr<Tokenizer> tokenizer;
    std::string data_dir;  // the dataset the model was trained on; empty when the file names none
    int step = 0;          // optimizer steps of the run; 0 for a GGUF file
    SpecialTokens special;  // an imported model's, or those a run kept from its --init-from model
};

// A Hugging Face folder (config.json inside: export/hf_import.h), a GGUF file by its magic
// bytes, anything else as a checkpoint.
ModelFile load_model_file(const std::string& path);

// A model file as inference runs it (generate, eval, serve). A GGUF file or a checkpoint is read
// tensor by tensor straight into the inference model, the one copy of its weights a load makes;
// a Hugging Face folder goes through ModelParameters, freed once the inference model is built.
struct InferenceFile {
    std::unique_ptr<InferenceModel> model;
    std::unique_ptr<Tokenizer> tokenizer;
    std::string data_dir;
    int step = 0;
    SpecialTokens special;
};
InferenceFile load_inference_file(const std::string& path);
// The inference model of file.model, with the file's tokenizer and the rest moved over; file.model
// stays (to convert it further), the caller frees it when done.
InferenceFile inference_file_from(ModelFile& file);

// The tokenizer of a dataset folder (its tokenizer.bin), a checkpoint (read without its
// tensors), or a Hugging Face folder or GGUF file (read whole).
std::unique_ptr<Tokenizer> load_tokenizer_from(const std::string& path);

}  // namespace dqt::cli
