#include "model_files.h"

#include <utility>

#include "export/gguf_model.h"
#include "io/gguf.h"
#include "train/model_checkpoint.h"

namespace dqt::cli {

ModelFile load_model_file(const std::string& path) {
    if (is_gguf_file(path)) {
        ImportedGguf imported = import_gguf(path);
        return {std::move(imported.model), std::move(imported.tokenizer), imported.data_dir, 0};
    }
    LoadedModel loaded = load_model_checkpoint(path);
    return {std::move(loaded.model), std::move(loaded.tokenizer), loaded.options.data_dir, loaded.step};
}

}  // namespace dqt::cli
