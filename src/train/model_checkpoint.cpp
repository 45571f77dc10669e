#include "train/model_checkpoint.h"

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/checkpoint.h"

namespace dqt {

namespace {

constexpr const char* kCheckpointKind = "dqt-train";

std::vector<int64_t> shape_of(const ParamTensor& tensor) {
    if (tensor.rows == 1) return {tensor.cols};
    return {tensor.rows, tensor.cols};
}

void read_tensors(const CheckpointReader& reader, const std::string& prefix, const ParamLayout& layout, float* base) {
    for (const ParamTensor& tensor : layout.tensors) {
        reader.read(prefix + tensor.name, "f32", shape_of(tensor), base + tensor.offset, tensor.count() * sizeof(float));
    }
}

void check_kind(const CheckpointReader& reader, const std::string& path) {
    require(reader.meta().value("kind", "") == kCheckpointKind,
            "checkpoint " + path + " is not a dqt training checkpoint");
}

}  // namespace

void save_training_checkpoint(const std::string& path, const TrainOptions& options, int step,
                              const ModelParameters& model, const AdamWState& state, const Tokenizer& tokenizer) {
    nlohmann::json meta;
    meta["kind"] = kCheckpointKind;
    meta["step"] = step;
    meta["options"] = options;
    meta["tokenizer_kind"] = tokenizer.kind();
    const std::string tokenizer_blob = tokenizer.serialize();

    std::vector<TensorView> tensors;
    for (const ParamTensor& tensor : model.layout.tensors) {
        const size_t bytes = tensor.count() * sizeof(float);
        tensors.push_back({"param." + tensor.name, "f32", shape_of(tensor), model.values.data() + tensor.offset, bytes});
        tensors.push_back({"adam.m." + tensor.name, "f32", shape_of(tensor), state.m.data() + tensor.offset, bytes});
        tensors.push_back({"adam.v." + tensor.name, "f32", shape_of(tensor), state.v.data() + tensor.offset, bytes});
    }
    tensors.push_back({"tokenizer", "u8", {static_cast<int64_t>(tokenizer_blob.size())}, tokenizer_blob.data(),
                       tokenizer_blob.size()});
    save_checkpoint(path, meta, tensors);
}

TrainOptions read_checkpoint_options(const std::string& path) {
    CheckpointReader reader(path);
    check_kind(reader, path);
    return reader.meta().at("options").get<TrainOptions>();
}

LoadedModel load_model_checkpoint(const std::string& path) {
    CheckpointReader reader(path);
    check_kind(reader, path);
    LoadedModel loaded;
    loaded.options = reader.meta().at("options").get<TrainOptions>();
    loaded.options.model.validate();
    loaded.step = reader.meta().value("step", 0);
    loaded.model = std::make_unique<ModelParameters>(loaded.options.model);
    read_tensors(reader, "param.", loaded.model->layout, loaded.model->values.data());
    const std::vector<int64_t> blob_shape = reader.shape("tokenizer");
    std::string blob(static_cast<size_t>(blob_shape.at(0)), '\0');
    reader.read("tokenizer", "u8", blob_shape, blob.data(), blob.size());
    loaded.tokenizer = load_tokenizer(reader.meta().value("tokenizer_kind", ""), blob);
    require(loaded.tokenizer->vocab_size() == loaded.options.model.vocab_size,
            "checkpoint " + path + ": tokenizer vocabulary does not match the model's vocab_size");
    return loaded;
}

int load_training_state(const std::string& path, ModelParameters& model, AdamWState& state) {
    CheckpointReader reader(path);
    check_kind(reader, path);
    read_tensors(reader, "param.", model.layout, model.values.data());
    read_tensors(reader, "adam.m.", model.layout, state.m.data());
    read_tensors(reader, "adam.v.", model.layout, state.v.data());
    return reader.meta().value("step", 0);
}

}  // namespace dqt
