#include "export/hf_export.h"

#include <filesystem>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "data/byte_symbols.h"
#include "export/hf_names.h"
#include "export/rope_rows.h"
#include "io/atomic_file.h"
#include "io/safetensors.h"

namespace dqt {

namespace fs = std::filesystem;

namespace {

using nlohmann::json;

template <typename T>
std::string as_bytes(const std::vector<T>& values) {
    return std::string(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(T));
}

json hf_config(const ModelParameters& model) {
    const ModelConfig& c = model.config;
    json j = {
        {"architectures", {c.subln ? "BitNetForCausalLM" : "LlamaForCausalLM"}},
        {"model_type", c.subln ? "bitnet" : "llama"},
        {"hidden_size", c.dim},
        {"intermediate_size", c.ffn_dim},
        {"num_hidden_layers", c.n_layers},
        {"num_attention_heads", c.n_heads},
        {"num_key_value_heads", c.n_kv_heads},
        {"head_dim", c.head_dim()},
        {"vocab_size", c.vocab_size},
        {"max_position_embeddings", c.seq_len},
        {"rms_norm_eps", c.norm_eps},
        {"rope_theta", c.rope_theta},
        {"hidden_act", c.ffn_activation == GatedActivation::relu2 ? "relu2" : "silu"},
        {"tie_word_embeddings", c.tie_embeddings},
        {"initializer_range", c.init_std},
        {"attention_bias", false},
        {"torch_dtype", "float32"},
    };
    if (model.method.kind == Method::fp) return j;
    json quantization = {{"quant_method", "dqt"}, {"method", model.method}};
    quantization["weights"] =
        model.method.kind == Method::bitnet
            ? "bitnet b1.58: each quantized weight is stored as its fp32 latent; the forward multiplies round(clip(W / "
              "(gamma + 1e-5), -1, 1)) * gamma with gamma = mean |W| of the tensor"
            : "dqt: each quantized weight is stored as its integer codes (NAME.weight_codes) and the tensor's scale s "
              "(NAME.weight_code_scale); NAME.weight holds codes / s";
    quantization["activations"] =
        "the input of every quantized linear is quantized per row to int8: a = round(x * 127 / max(max |x|, 1e-5)), "
        "clipped to [-128, 127]";
    quantization["quantized_modules"] = {"block linears (q, k, v, o, gate, up, down)"};
    if (model.method.quantize_embedding) quantization["quantized_modules"].push_back("embed_tokens (read, not multiplied)");
    if (model.method.quantize_head) quantization["quantized_modules"].push_back("lm_head");
    j["quantization_config"] = quantization;
    return j;
}

json byte_tokenizer_json() {
    json vocab = json::object();
    for (int b = 0; b < 256; ++b) vocab[gpt2_byte_symbol(b)] = b;
    const json byte_level = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", false}, {"use_regex", false}};
    return {{"version", "1.0"},
            {"truncation", nullptr},
            {"padding", nullptr},
            {"added_tokens", json::array()},
            {"normalizer", nullptr},
            {"pre_tokenizer", byte_level},
            {"post_processor", nullptr},
            {"decoder", byte_level},
            {"model",
             {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr}, {"continuing_subword_prefix", nullptr},
              {"end_of_word_suffix", nullptr}, {"fuse_unk", false}, {"byte_fallback", false}, {"vocab", vocab},
              {"merges", json::array()}}}};
}

void write_tokenizer_files(const Tokenizer& tokenizer, const SpecialTokens& special, int context,
                           const std::string& folder) {
    // dqt feeds no BOS and ends no document with EOS (documents are joined by text, data/dataset.h);
    // an imported model's prompts start with BOS where its files said so.
    json config = {{"add_bos_token", special.add_bos}, {"add_eos_token", false}, {"model_max_length", context}};
    if (tokenizer.kind() == "bpe") {
        write_file_atomic(folder + "/tokenizer.model", tokenizer.serialize());
        config["tokenizer_class"] = "LlamaTokenizer";
        // dqt trains without sentencepiece's dummy prefix; an imported LLaMA tokenizer has one.
        config["add_prefix_space"] = tokenizer.decode(tokenizer.encode("a")) == " a";
        config["legacy"] = false;
    } else if (tokenizer.kind() == "byte-level-bpe") {
        write_file_atomic(folder + "/tokenizer.json", tokenizer.serialize());  // the file it was read from
        config["tokenizer_class"] = "PreTrainedTokenizerFast";
    } else {
        require(tokenizer.kind() == "byte", "export: unknown tokenizer kind " + tokenizer.kind());
        write_file_atomic(folder + "/tokenizer.json", byte_tokenizer_json().dump(2) + "\n");
        config["tokenizer_class"] = "PreTrainedTokenizerFast";
    }
    write_file_atomic(folder + "/tokenizer_config.json", config.dump(2) + "\n");
}

std::vector<SafetensorsTensor> hf_tensors(const ModelParameters& model) {
    std::vector<SafetensorsTensor> tensors;
    const int head_dim = model.config.head_dim();
    for (const ParamTensor& t : model.layout.tensors) {
        const std::vector<int64_t> shape = hf_tensor_shape(t);
        const bool permute = hf_rope_permuted(t.name);
        // Values as stored: fp32 values, bitnet's latents, or a coded tensor's codes / s.
        tensors.push_back({hf_tensor_name(t.name), "F32", shape, [&model, &t, head_dim, permute] {
                               std::vector<float> values(t.count());
                               model.read_dense(t, values.data());
                               return as_bytes(rows_in_file_order(values, t.rows, t.cols, head_dim, permute));
                           }});
        if (!t.stores_codes()) continue;
        tensors.push_back({hf_codes_name(t.name), "I8", shape, [&model, &t, head_dim, permute] {
                               std::vector<int8_t> codes(t.count());
                               t.traits().read_integers(model.stored(t), t, t.traits().weight_scale(model.stored(t), t), 0, t.count(),
                                                        codes.data());
                               return as_bytes(rows_in_file_order(codes, t.rows, t.cols, head_dim, permute));
                           }});
        tensors.push_back({hf_code_scale_name(t.name), "F32", {1},
                           [&model, &t] { return as_bytes(std::vector<float>{model.scale(t)}); }});
    }
    return tensors;
}

// Removes the temporary folder unless the export got to its rename.
class TemporaryFolder {
public:
    explicit TemporaryFolder(std::string path) : path_(std::move(path)) {
        std::error_code ignored;
        fs::remove_all(path_, ignored);  // left by an export that was killed
        std::error_code error;
        fs::create_directory(path_, error);
        require(!error, "export: cannot create " + path_ + ": " + error.message());
    }
    ~TemporaryFolder() {
        std::error_code ignored;
        if (!kept_) fs::remove_all(path_, ignored);
    }
    TemporaryFolder(const TemporaryFolder&) = delete;
    TemporaryFolder& operator=(const TemporaryFolder&) = delete;
    const std::string& path() const { return path_; }
    void keep() { kept_ = true; }

private:
    std::string path_;
    bool kept_ = false;
};

}  // namespace

HfExportSummary export_hf_folder(const ModelParameters& model, const Tokenizer& tokenizer, const SpecialTokens& special,
                                 const std::string& folder) {
    require(tokenizer.vocab_size() == model.config.vocab_size,
            "export: the tokenizer's vocabulary does not match the model's");
    const fs::path destination = fs::path(folder).lexically_normal();
    require(!destination.filename().empty(), "export: --out " + folder + " names no folder");
    std::error_code error;
    require(!fs::exists(destination, error) || (fs::is_directory(destination) && fs::is_empty(destination)),
            "export: " + folder + " exists and is not an empty folder: choose another --out or remove it");
    const fs::path parent = destination.has_parent_path() ? destination.parent_path() : fs::path(".");
    require(fs::is_directory(parent, error), "export: the folder " + parent.string() + " for --out does not exist");

    TemporaryFolder temporary(destination.string() + ".tmp." + std::to_string(::getpid()));
    const std::string& out = temporary.path();
    special.check(model.config.vocab_size, "export");
    json config = hf_config(model);
    json generation = {{"max_length", model.config.seq_len}};
    for (json* file : {&config, &generation}) {
        if (special.bos >= 0) (*file)["bos_token_id"] = special.bos;
        const std::vector<int32_t>& ends = special.end_of_generation;
        if (ends.size() == 1) (*file)["eos_token_id"] = ends[0];
        if (ends.size() > 1) (*file)["eos_token_id"] = ends;
    }
    write_file_atomic(out + "/config.json", config.dump(2) + "\n");
    write_file_atomic(out + "/generation_config.json", generation.dump(2) + "\n");
    write_tokenizer_files(tokenizer, special, model.config.seq_len, out);
    const std::vector<SafetensorsTensor> tensors = hf_tensors(model);
    write_safetensors(out + "/model.safetensors", tensors, {{"format", "pt"}});

    if (fs::exists(destination)) fs::remove(destination);  // an empty folder
    fs::rename(out, destination, error);
    require(!error, "export: cannot rename " + out + " to " + destination.string() + ": " + error.message());
    temporary.keep();
    HfExportSummary summary;
    summary.architecture = config.at("architectures").at(0).get<std::string>();
    summary.tensors = tensors.size();
    summary.bytes = fs::file_size(destination / "model.safetensors");
    return summary;
}

}  // namespace dqt
