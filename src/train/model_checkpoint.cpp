#include "train/model_checkpoint.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <functional>
#include <utility>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/checkpoint.h"

namespace dqt {

namespace {

constexpr const char* kCheckpointKind = "dqt-train";
constexpr const char* kResidualTensor = "comm.gradient_residual";
constexpr const char* kMasterTensor = "comm.weight_master";

std::vector<int64_t> shape_of(const ParamTensor& tensor) {
    if (tensor.rows == 1) return {tensor.cols};
    return {tensor.rows, tensor.cols};
}

// The stored form of every parameter: "param.NAME" (f32) or "codes.NAME" (u8, packed as in
// quant/codes.h) with "scale.NAME" (f32, one value).
void add_parameters(std::vector<TensorView>& out, const ModelParameters& model) {
    for (const ParamTensor& tensor : model.layout.tensors) {
        if (tensor.stores_codes()) {
            const size_t bytes = tensor.traits().stored_bytes(tensor.count());
            out.push_back({"codes." + tensor.name, "u8", {static_cast<int64_t>(bytes)}, model.code(tensor), bytes});
            out.push_back({"scale." + tensor.name, "f32", {1}, &model.scale(tensor), sizeof(float)});
        } else {
            out.push_back({"param." + tensor.name, "f32", shape_of(tensor), model.value(tensor),
                           tensor.count() * sizeof(float)});
        }
    }
}

void read_parameters(const CheckpointReader& reader, ModelParameters& model) {
    for (const ParamTensor& tensor : model.layout.tensors) {
        if (tensor.stores_codes()) {
            const size_t bytes = tensor.traits().stored_bytes(tensor.count());
            reader.read("codes." + tensor.name, "u8", {static_cast<int64_t>(bytes)}, model.code(tensor), bytes);
            reader.read("scale." + tensor.name, "f32", {1}, &model.scale(tensor), sizeof(float));
        } else {
            reader.read("param." + tensor.name, "f32", shape_of(tensor), model.value(tensor),
                        tensor.count() * sizeof(float));
        }
    }
}

// Every parameter that the checkpoint's options describe is stored in it with that size,
// checked before anything is allocated: crafted options (dim 2^20, a billion layers) are
// refused here, so what a load allocates is bounded by the file.
void check_parameters_match_options(const CheckpointReader& reader, const TrainOptions& options,
                                    const std::string& path) {
    const size_t stored = reader.names().size();
    require(static_cast<size_t>(options.model.n_layers) <= stored,
            "checkpoint " + path + ": its options describe " + std::to_string(options.model.n_layers) +
                " layers, but it holds only " + std::to_string(stored) + " tensors (corrupt or edited options)");
    const ParamLayout layout = make_param_layout(options.model, options.method);
    for (const ParamTensor& tensor : layout.tensors) {
        const bool codes = tensor.stores_codes();
        const std::string name = (codes ? "codes." : "param.") + tensor.name;
        const std::vector<int64_t> expected =
            codes ? std::vector<int64_t>{static_cast<int64_t>(tensor.traits().stored_bytes(tensor.count()))}
                  : shape_of(tensor);
        require(reader.has(name) && reader.shape(name) == expected,
                "checkpoint " + path + ": tensor " + name + " is missing or not the size its options describe " +
                    "(corrupt or edited options)");
    }
}

const char* moment_dtype(const TensorMoments& moments) {
    switch (moments.dtype) {
        case StateDtype::fp32: return "f32";
        case StateDtype::bf16: return "bf16";
        case StateDtype::q8: return "u8";
    }
    return "?";
}

// A learned DQT scale's two moments are state of coded tensors under that rule only.
bool has_scale_moments(const ModelParameters& model, const ParamTensor& tensor) {
    return tensor.stores_codes() && model.method.scale_rule == ScaleRule::learned;
}

// "adam.m.NAME" and "adam.v.NAME" in the tensor's shape (8-bit: the codes), for 8-bit state
// "adam.m_absmax.NAME" and "adam.v_absmax.NAME" (f32, one per block), for a learned scale
// "adam.scale.NAME" (f32 [2]: m, v), and with sub-grid residuals "dqt.residual.NAME" (i8, the
// tensor's shape).
void add_moments(std::vector<TensorView>& out, const ModelParameters& model, const ParamTensor& tensor,
                 const TensorMoments& moments) {
    if (has_scale_moments(model, tensor)) {
        out.push_back({"adam.scale." + tensor.name, "f32", {2}, moments.scale_moments, sizeof moments.scale_moments});
    }
    const size_t bytes = tensor.count() * moments.element_bytes();
    out.push_back({"adam.m." + tensor.name, moment_dtype(moments), shape_of(tensor), moments.m.data(), bytes});
    out.push_back({"adam.v." + tensor.name, moment_dtype(moments), shape_of(tensor), moments.v.data(), bytes});
    if (moments.dtype == StateDtype::q8) {
        const std::vector<int64_t> blocks = {static_cast<int64_t>(moments.blocks())};
        out.push_back({"adam.m_absmax." + tensor.name, "f32", blocks, moments.m_absmax.data(), moments.m_absmax.bytes()});
        out.push_back({"adam.v_absmax." + tensor.name, "f32", blocks, moments.v_absmax.data(), moments.v_absmax.bytes()});
    }
    if (tensor.residual_bits > 0) {
        out.push_back({"dqt.residual." + tensor.name, "i8", shape_of(tensor), moments.residual.data(),
                       moments.residual.bytes()});
    }
}

void read_whole_moments(const CheckpointReader& reader, const ParamTensor& tensor, TensorMoments& moments) {
    const size_t bytes = tensor.count() * moments.element_bytes();
    reader.read("adam.m." + tensor.name, moment_dtype(moments), shape_of(tensor), moments.m.data(), bytes);
    reader.read("adam.v." + tensor.name, moment_dtype(moments), shape_of(tensor), moments.v.data(), bytes);
    if (moments.dtype == StateDtype::q8) {
        const std::vector<int64_t> blocks = {static_cast<int64_t>(moments.blocks())};
        reader.read("adam.m_absmax." + tensor.name, "f32", blocks, moments.m_absmax.data(), moments.m_absmax.bytes());
        reader.read("adam.v_absmax." + tensor.name, "f32", blocks, moments.v_absmax.data(), moments.v_absmax.bytes());
    }
    if (tensor.residual_bits > 0) {
        reader.read("dqt.residual." + tensor.name, "i8", shape_of(tensor), moments.residual.data(),
                    moments.residual.bytes());
    }
}

// Moments that hold part of the tensor (a data-parallel shard) take their slice of the stored whole.
void read_moments(const CheckpointReader& reader, const ModelParameters& model, const ParamTensor& tensor,
                  TensorMoments& moments) {
    if (moments.first == 0 && moments.count == tensor.count()) {
        read_whole_moments(reader, tensor, moments);
    } else {
        TensorMoments whole(0, tensor.count(), moments.dtype, tensor.residual_bits > 0, MemCategory::scratch);
        read_whole_moments(reader, tensor, whole);
        copy_moments_range(whole, moments);
    }
    if (has_scale_moments(model, tensor)) {
        reader.read("adam.scale." + tensor.name, "f32", {2}, moments.scale_moments, sizeof moments.scale_moments);
    }
}

// The run's metadata as save_training_checkpoint writes it, its options validated and checked
// against the stored tensors. A field that is missing or of the wrong type (a crafted file, or
// one from another program) is one line naming the file.
struct RunMetadata {
    TrainOptions options;
    std::string tokenizer_kind;
    TrainingPosition position;
};

RunMetadata read_run_metadata(const CheckpointReader& reader, const std::string& path) {
    const nlohmann::json& meta = reader.meta();
    const auto kind = meta.find("kind");
    require(kind != meta.end() && *kind == kCheckpointKind, "checkpoint " + path + " is not a dqt training checkpoint");
    RunMetadata run;
    try {
        run.options = meta.at("options").get<TrainOptions>();
        run.tokenizer_kind = meta.at("tokenizer_kind").get<std::string>();
        // Read wide, then bounded: get<int> would wrap 2^32 + 2 to 2 and 10^15 to a negative.
        const int64_t step = meta.at("step").get<int64_t>();
        require(step >= 0 && step <= INT_MAX,
                "checkpoint " + path + ": its step " + std::to_string(step) + " is out of range: the file is corrupt");
        run.position.step = static_cast<int>(step);
        run.position.previous_grad_norm = meta.at("previous_grad_norm").get<double>();
    } catch (const nlohmann::json::exception& e) {
        throw Error("checkpoint " + path + ": its metadata is not what dqt writes (" + quote_untrusted(e.what(), 120) +
                    "): the file is corrupt");
    }
    require(run.position.step >= 0 && std::isfinite(run.position.previous_grad_norm) &&
                run.position.previous_grad_norm >= 0,
            "checkpoint " + path + ": its metadata holds a negative step or gradient norm: the file is corrupt");
    run.options.model.validate();
    run.options.method.validate();
    check_parameters_match_options(reader, run.options, path);
    return run;
}

std::unique_ptr<Tokenizer> read_tokenizer(const CheckpointReader& reader, const std::string& kind,
                                          const std::string& path) {
    require(reader.has("tokenizer"), "checkpoint " + path + " holds no tokenizer");
    const std::vector<int64_t> blob_shape = reader.shape("tokenizer");
    require(blob_shape.size() == 1, "checkpoint " + path + ": its tokenizer is malformed");
    std::string blob(static_cast<size_t>(blob_shape[0]), '\0');
    reader.read("tokenizer", "u8", blob_shape, blob.data(), blob.size());
    return load_tokenizer(kind, blob);
}

// Hands the checkpoint's metadata and tensors (pointing at the live parameters and state) to
// `store`, which writes them now or copies them for a background write.
void with_training_checkpoint(const TrainOptions& options, const TrainingPosition& position,
                              const ModelParameters& model, const OptimizerState& state, const Tokenizer& tokenizer,
                              const CommunicationState& communication,
                              const std::function<void(const nlohmann::json&, const std::vector<TensorView>&)>& store) {
    nlohmann::json meta;
    meta["kind"] = kCheckpointKind;
    meta["step"] = position.step;
    meta["previous_grad_norm"] = position.previous_grad_norm;
    meta["options"] = options;
    meta["tokenizer_kind"] = tokenizer.kind();
    const std::string tokenizer_blob = tokenizer.serialize();

    std::vector<TensorView> tensors;
    add_parameters(tensors, model);
    for (const ParamTensor& tensor : model.layout.tensors) add_moments(tensors, model, tensor, state.of(tensor));
    tensors.push_back({"tokenizer", "u8", {static_cast<int64_t>(tokenizer_blob.size())}, tokenizer_blob.data(),
                       tokenizer_blob.size()});
    if (communication.gradient_residuals) {
        meta["gradient_residual_ranks"] = communication.residual_ranks;
        const size_t count = communication.gradient_residual_count;
        tensors.push_back({kResidualTensor, "f32", {static_cast<int64_t>(count)}, communication.gradient_residuals,
                           count * sizeof(float)});
    }
    if (communication.weight_master) {
        const size_t count = model.layout.value_total;
        tensors.push_back({kMasterTensor, "f32", {static_cast<int64_t>(count)}, communication.weight_master,
                           count * sizeof(float)});
    }
    store(meta, tensors);
}

}  // namespace

void save_training_checkpoint(const std::string& path, const TrainOptions& options, const TrainingPosition& position,
                              const ModelParameters& model, const OptimizerState& state, const Tokenizer& tokenizer,
                              const CommunicationState& communication) {
    with_training_checkpoint(options, position, model, state, tokenizer, communication,
                             [&](const nlohmann::json& meta, const std::vector<TensorView>& tensors) {
                                 save_checkpoint(path, meta, tensors);
                             });
}

void start_training_checkpoint(BackgroundCheckpointWriter& writer, const std::string& path, const TrainOptions& options,
                               const TrainingPosition& position, const ModelParameters& model,
                               const OptimizerState& state, const Tokenizer& tokenizer,
                               const CommunicationState& communication) {
    with_training_checkpoint(options, position, model, state, tokenizer, communication,
                             [&](const nlohmann::json& meta, const std::vector<TensorView>& tensors) {
                                 writer.write(path, meta, tensors);
                             });
}

void reserve_training_checkpoint(BackgroundCheckpointWriter& writer, const TrainOptions& options,
                                 const ModelParameters& model, const OptimizerState& state, const Tokenizer& tokenizer) {
    with_training_checkpoint(options, TrainingPosition{}, model, state, tokenizer, CommunicationState{},
                             [&](const nlohmann::json&, const std::vector<TensorView>& tensors) {
                                 writer.reserve(tensors);
                             });
}

CheckpointRun read_checkpoint_run(const std::string& path) {
    CheckpointReader reader(path);
    RunMetadata metadata = read_run_metadata(reader, path);
    CheckpointRun run;
    run.options = std::move(metadata.options);
    run.tokenizer = read_tokenizer(reader, metadata.tokenizer_kind, path);
    run.step = metadata.position.step;
    return run;
}

namespace {

// A checkpoint's parameters, each read from the file in its stored form when asked and turned
// into what the caller wants by its weight format's reads (model/weight_format.h), as the same
// tensor held in a ModelParameters would be.
class CheckpointSource : public TensorSource {
public:
    CheckpointSource(std::unique_ptr<CheckpointReader> reader, const TrainOptions& options)
        : reader_(std::move(reader)),
          config_(options.model),
          method_(options.method),
          layout_(make_param_layout(config_, method_)),
          tensors_(bind_tensors(config_, layout_)) {}
    const ModelConfig& config() const override { return config_; }
    const MethodConfig& method() const override { return method_; }
    const ModelTensors& tensors() const override { return tensors_; }

    void read_values(const ParamTensor& t, float* out) const override {
        reader_->read("param." + t.name, "f32", shape_of(t), out, t.count() * sizeof(float));
    }
    IntegerScales read_integers(const ParamTensor& t, int8_t* q) const override {
        StoredTensor stored{nullptr, nullptr, 0.0f, method_.grid};
        Array<float> values;
        Array<uint8_t> codes;
        if (t.stores_codes()) {
            const size_t bytes = t.traits().stored_bytes(t.count());
            codes = Array<uint8_t>(MemCategory::weights, bytes);
            reader_->read("codes." + t.name, "u8", {static_cast<int64_t>(bytes)}, codes.data(), bytes);
            reader_->read("scale." + t.name, "f32", {1}, &stored.scale, sizeof(float));
            stored.codes = codes.data();
        } else {
            values = Array<float>(MemCategory::weights, t.count());
            read_values(t, values.data());
            stored.values = values.data();
        }
        const IntegerScales scales{t.traits().weight_scale(stored, t), stored.scale};
        t.traits().read_integers(stored, t, scales.weight_scale, 0, t.count(), q);
        return scales;
    }

private:
    std::unique_ptr<CheckpointReader> reader_;
    ModelConfig config_;
    MethodConfig method_;
    ParamLayout layout_;
    ModelTensors tensors_;
};

}  // namespace

OpenedCheckpoint open_model_checkpoint(const std::string& path) {
    auto reader = std::make_unique<CheckpointReader>(path);
    RunMetadata metadata = read_run_metadata(*reader, path);
    OpenedCheckpoint opened;
    opened.options = std::move(metadata.options);
    opened.step = metadata.position.step;
    opened.tokenizer = read_tokenizer(*reader, metadata.tokenizer_kind, path);
    require(opened.tokenizer->vocab_size() == opened.options.model.vocab_size,
            "checkpoint " + path + ": tokenizer vocabulary does not match the model's vocab_size");
    opened.tensors = std::make_unique<CheckpointSource>(std::move(reader), opened.options);
    return opened;
}

LoadedModel load_model_checkpoint(const std::string& path) {
    CheckpointReader reader(path);
    RunMetadata metadata = read_run_metadata(reader, path);
    LoadedModel loaded;
    loaded.options = std::move(metadata.options);
    loaded.step = metadata.position.step;
    loaded.model = std::make_unique<ModelParameters>(loaded.options.model, loaded.options.method);
    read_parameters(reader, *loaded.model);
    loaded.tokenizer = read_tokenizer(reader, metadata.tokenizer_kind, path);
    require(loaded.tokenizer->vocab_size() == loaded.options.model.vocab_size,
            "checkpoint " + path + ": tokenizer vocabulary does not match the model's vocab_size");
    return loaded;
}

TrainingPosition load_training_state(const std::string& path, ModelParameters& model, OptimizerState& state) {
    CheckpointReader reader(path);
    const RunMetadata metadata = read_run_metadata(reader, path);
    read_parameters(reader, model);
    for (const ParamTensor& tensor : model.layout.tensors) read_moments(reader, model, tensor, state.of(tensor));
    return metadata.position;
}

bool load_communication_state(const std::string& path, const ShardPlan& plan, int rank, Array<float>* residual,
                              Array<float>* master) {
    if (!residual && !master) return true;
    CheckpointReader reader(path);
    if (master && reader.has(kMasterTensor)) {
        const size_t total = plan.value_cut.back();
        Array<float> whole(MemCategory::scratch, total);
        reader.read(kMasterTensor, "f32", {static_cast<int64_t>(total)}, whole.data(), whole.bytes());
        std::copy_n(whole.data() + plan.value_cut[static_cast<size_t>(rank)], master->size(), master->data());
    }
    if (!residual) return true;
    const auto ranks = reader.meta().find("gradient_residual_ranks");
    if (!reader.has(kResidualTensor) || ranks == reader.meta().end() || *ranks != plan.ranks) return false;
    // Every rank's residual: the layout minus its shard, in rank order.
    size_t count = 0, offset = 0;
    for (int r = 0; r < plan.ranks; ++r) {
        if (r == rank) offset = count;
        count += plan.outside(r);
    }
    Array<float> whole(MemCategory::scratch, count);
    reader.read(kResidualTensor, "f32", {static_cast<int64_t>(count)}, whole.data(), whole.bytes());
    std::copy_n(whole.data() + offset, residual->size(), residual->data());
    return true;
}

}  // namespace dqt
