#include "export/hf_import.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <span>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/memory.h"
#include "data/byte_level_bpe.h"
#include "export/hf_names.h"
#include "export/rope_rows.h"
#include "io/atomic_file.h"
#include "io/safetensors.h"
#include "quant/codes.h"

namespace dqt {

namespace fs = std::filesystem;

namespace {

constexpr int kMaxImportedContext = 4096;

nlohmann::json read_json(const std::string& path) {
    const nlohmann::json parsed = nlohmann::json::parse(read_file(path, "Hugging Face file"), nullptr, false);
    require(!parsed.is_discarded() && parsed.is_object(), path + " is not a JSON object");
    return parsed;
}

// A whole number in [1, limit] under `key`; `fallback` when absent and fallback > 0.
int positive_int(const nlohmann::json& config, const std::string& key, const std::string& path, int limit,
                 int fallback = 0) {
    if (!config.contains(key) && fallback > 0) return fallback;
    require(config.contains(key), path + " has no " + key);
    const nlohmann::json& value = config.at(key);
    require(value.is_number_integer() && value.get<int64_t>() >= 1 && value.get<int64_t>() <= limit,
            path + ": " + key + " must be a whole number from 1 to " + std::to_string(limit) + ", got " +
                quote_untrusted(value.dump()));
    return static_cast<int>(value.get<int64_t>());
}

double positive_number(const nlohmann::json& config, const std::string& key, const std::string& path, double fallback) {
    if (!config.contains(key)) return fallback;
    const nlohmann::json& value = config.at(key);
    require(value.is_number() && value.get<double>() > 0.0 && value.get<double>() < 1e12,
            path + ": " + key + " must be a positive number, got " + quote_untrusted(value.dump()));
    return value.get<double>();
}

// j: config.json at path.
ModelConfig read_config(const nlohmann::json& j, const std::string& path, bool subln) {
    require(!j.contains("rope_scaling") || j.at("rope_scaling").is_null(),
            path + " asks for rope_scaling (a long-context RoPE variant), which dqt does not implement");
    ModelConfig c;
    c.dim = positive_int(j, "hidden_size", path, 1 << 16);
    c.n_layers = positive_int(j, "num_hidden_layers", path, 1024);
    c.n_heads = positive_int(j, "num_attention_heads", path, 1024);
    c.n_kv_heads = positive_int(j, "num_key_value_heads", path, 1024, c.n_heads);
    c.ffn_dim = positive_int(j, "intermediate_size", path, 1 << 18);
    c.vocab_size = positive_int(j, "vocab_size", path, 1 << 20);
    c.seq_len = std::min(positive_int(j, "max_position_embeddings", path, 1 << 24, 2048), kMaxImportedContext);
    c.norm_eps = static_cast<float>(positive_number(j, "rms_norm_eps", path, 1e-6));
    c.rope_theta = static_cast<float>(positive_number(j, "rope_theta", path, 10000.0));
    if (j.contains("head_dim") && !j.at("head_dim").is_null()) {
        require(c.dim % c.n_heads == 0, path + ": hidden_size " + std::to_string(c.dim) +
                                            " is not a multiple of num_attention_heads " + std::to_string(c.n_heads));
        // Compared with the quotient: a crafted head_dim times the head count overflows.
        const nlohmann::json& head_dim = j.at("head_dim");
        const int expected_head_dim = c.dim / c.n_heads;
        require(head_dim.is_number_integer() && head_dim.get<int64_t>() == expected_head_dim,
                path + ": head_dim must be hidden_size / num_attention_heads (" + std::to_string(expected_head_dim) +
                    "), got " + quote_untrusted(head_dim.dump()));
    }
    const std::string act = j.contains("hidden_act") && j.at("hidden_act").is_string() ? j.at("hidden_act").get<std::string>()
                                                                                      : "silu";
    require(act == "silu" || act == "relu2",
            path + ": hidden_act " + quote_untrusted(act) + " is not supported (silu or relu2)");
    c.ffn_activation = act == "relu2" ? GatedActivation::relu2 : GatedActivation::silu;
    const nlohmann::json tie = j.value("tie_word_embeddings", nlohmann::json(false));
    require(tie.is_boolean(), path + ": tie_word_embeddings must be true or false");
    c.tie_embeddings = tie.get<bool>();
    c.init_std = static_cast<float>(positive_number(j, "initializer_range", path, c.init_std));
    c.subln = subln;
    c.validate();
    // Refused before the weights are allocated: a crafted config's billion layers never are.
    const double bytes = static_cast<double>(c.parameter_count()) * sizeof(float);
    require(bytes <= static_cast<double>(physical_memory_bytes()),
            path + " describes " + std::to_string(c.parameter_count()) + " parameters, " +
                std::to_string(static_cast<int64_t>(bytes / (1 << 30))) +
                " GiB in fp32: more than this machine's memory");
    return c;
}

// Tensor name -> the safetensors file holding it: the index's weight map, or model.safetensors.
class ShardSet {
public:
    explicit ShardSet(const std::string& folder) : folder_(folder) {
        const std::string index = folder + "/model.safetensors.index.json";
        if (!fs::exists(index)) {
            const std::string single = folder + "/model.safetensors";
            require(fs::exists(single), folder + " holds neither model.safetensors nor model.safetensors.index.json");
            for (const std::string& name : open("model.safetensors").names()) file_of_[name] = "model.safetensors";
            return;
        }
        const nlohmann::json j = read_json(index);
        require(j.contains("weight_map") && j.at("weight_map").is_object(), index + " has no weight_map object");
        for (const auto& [name, file] : j.at("weight_map").items()) {
            require(file.is_string(), index + ": the file of " + quote_untrusted(name) + " is not a string");
            const std::string shard = file.get<std::string>();
            // A shard is a file of this folder: no path leaves it.
            require(!shard.empty() && shard.find('/') == std::string::npos && shard != "." && shard != "..",
                    index + ": shard " + quote_untrusted(shard) + " is not a file name in the folder");
            file_of_[name] = shard;
        }
    }

    bool has(const std::string& name) const { return file_of_.count(name) != 0; }

    // The file holding `name`, its shape checked against `shape`.
    const SafetensorsReader& holding(const std::string& name, const std::vector<int64_t>& shape) {
        const auto found = file_of_.find(name);
        require(found != file_of_.end(), folder_ + " has no tensor " + name);
        const SafetensorsReader& reader = open(found->second);
        require(reader.has(name), folder_ + "/" + found->second + " has no tensor " + name + " (the index says it does)");
        std::string want, got;
        for (int64_t d : shape) want += (want.empty() ? "" : " x ") + std::to_string(d);
        for (int64_t d : reader.shape(name)) got += (got.empty() ? "" : " x ") + std::to_string(d);
        require(reader.shape(name) == shape,
                folder_ + ": " + name + " is " + got + " where config.json implies " + want);
        return reader;
    }

private:
    const SafetensorsReader& open(const std::string& file) {
        auto found = readers_.find(file);
        if (found == readers_.end()) {
            const std::string path = folder_ + "/" + file;
            require(fs::exists(path), folder_ + ": shard " + file + " is missing");
            found = readers_.emplace(file, std::make_unique<SafetensorsReader>(path)).first;
        }
        return *found->second;
    }

    std::string folder_;
    std::map<std::string, std::string> file_of_;
    std::map<std::string, std::unique_ptr<SafetensorsReader>> readers_;
};

// A tokenizer.json tokenizer that is dqt's byte tokenizer (export/hf_export.h writes it): 256
// tokens, token b the byte b. The reader requires every byte symbol in the vocabulary, so such
// a file has no merges and no added tokens, and it encodes every byte as itself.
bool is_byte_vocabulary(const Tokenizer& tokenizer) {
    if (tokenizer.vocab_size() != 256) return false;
    for (int32_t b = 0; b < 256; ++b) {
        if (tokenizer.decode(std::span<const int32_t>(&b, 1)) != std::string(1, static_cast<char>(b))) return false;
    }
    return true;
}

std::unique_ptr<Tokenizer> read_tokenizer(const std::string& folder, int vocab_size) {
    std::unique_ptr<Tokenizer> tokenizer;
    const std::string model_path = folder + "/tokenizer.model", json_path = folder + "/tokenizer.json";
    std::string path = model_path;
    if (fs::exists(model_path)) {
        tokenizer = load_tokenizer("bpe", read_file(model_path, "tokenizer"));
    } else {
        require(fs::exists(json_path), folder + " has neither tokenizer.model nor tokenizer.json");
        path = json_path;
        tokenizer = load_byte_level_bpe(read_file(json_path, "tokenizer"), json_path);
        if (is_byte_vocabulary(*tokenizer)) tokenizer = make_byte_tokenizer();  // the same ids, dqt's own kind
    }
    require(tokenizer->vocab_size() == vocab_size,
            path + " has " + std::to_string(tokenizer->vocab_size()) + " tokens where config.json's vocab_size is " +
                std::to_string(vocab_size));
    return tokenizer;
}

// The training method: fp unless config.json's (j, at path) quantization_config is dqt's own.
MethodConfig read_method(const nlohmann::json& j, const std::string& path) {
    if (!j.contains("quantization_config") || j.at("quantization_config").is_null()) return MethodConfig{};
    const nlohmann::json& q = j.at("quantization_config");
    const nlohmann::json kind = q.is_object() ? q.value("quant_method", nlohmann::json()) : nlohmann::json();
    require(kind == "dqt", path + ": quantization_config's quant_method " + quote_untrusted(kind.dump()) +
                               " is not read: dqt imports unquantized weights (F32, F16, BF16) and its own exports");
    MethodConfig method;
    try {
        method = q.at("method").get<MethodConfig>();
    } catch (const nlohmann::json::exception& e) {
        throw Error(path + ": quantization_config.method is malformed (" + quote_untrusted(e.what(), 120) + ")");
    }
    method.validate();
    return method;
}

// A dqt export's coded tensor: codes and scale, checked against the grid and against the
// dequantized values beside them (an edit of one without the other is refused).
void read_coded_tensor(ShardSet& shards, const std::string& folder, ModelParameters& model, const ParamTensor& tensor) {
    const std::vector<int64_t> shape = hf_tensor_shape(tensor);
    const bool permute = hf_rope_permuted(tensor.name);
    const int head_dim = model.config.head_dim();
    const std::string codes_name = hf_codes_name(tensor.name), scale_name = hf_code_scale_name(tensor.name);
    const CodeGrid grid = model.method.grid;
    const std::vector<int8_t> codes = rows_in_model_order(shards.holding(codes_name, shape).read_i8(codes_name),
                                                          tensor.rows, tensor.cols, head_dim, permute);
    const auto [low, high] = std::minmax_element(codes.begin(), codes.end());
    require(*low >= grid.qn() && *high <= grid.qp(),
            folder + ": " + codes_name + " holds a code outside the " + grid.label() + "-bit grid");
    const std::vector<float> scale = shards.holding(scale_name, {1}).read_f32(scale_name);
    require(std::isfinite(scale[0]) && scale[0] > 0.0f, folder + ": " + scale_name + " must be a positive number");
    for (size_t i = 0; i < codes.size(); ++i) write_code(model.code(tensor), grid, i, codes[i]);
    model.scale(tensor) = scale[0];
    std::vector<float> dequantized(tensor.count());
    model.read_dense(tensor, dequantized.data());
    const std::string name = hf_tensor_name(tensor.name);
    const std::vector<float> stored =
        rows_in_model_order(shards.holding(name, shape).read_f32(name), tensor.rows, tensor.cols, head_dim, permute);
    require(stored == dequantized, folder + ": " + name + " is not " + codes_name + " / " + scale_name +
                                       ": a file edited in one place and not the other?");
}

}  // namespace

bool is_hf_folder(const std::string& path) { return fs::is_directory(path) && fs::exists(path + "/config.json"); }

std::unique_ptr<Tokenizer> import_hf_tokenizer(const std::string& folder) {
    const std::string path = folder + "/config.json";
    return read_tokenizer(folder, positive_int(read_json(path), "vocab_size", path, 1 << 20));
}

// BOS and EOS ids from config.json, where generation_config.json overrides them (eos_token_id
// may be a list: each ends a generation); add_bos_token from tokenizer_config.json, by default
// true with a sentencepiece tokenizer.model (LLaMA's tokenizer class adds it) and false with a
// tokenizer.json. Ids outside the vocabulary are refused.
SpecialTokens read_special_tokens(const std::string& folder, const nlohmann::json& config, int vocab_size) {
    nlohmann::json ids = {{"bos_token_id", config.value("bos_token_id", nlohmann::json())},
                          {"eos_token_id", config.value("eos_token_id", nlohmann::json())}};
    const std::string generation_path = folder + "/generation_config.json";
    if (fs::exists(generation_path)) {
        const nlohmann::json generation = read_json(generation_path);
        for (const char* key : {"bos_token_id", "eos_token_id"})
            if (generation.contains(key) && !generation.at(key).is_null()) ids[key] = generation.at(key);
    }
    auto token = [&](const nlohmann::json& value, const char* key) {
        require(value.is_number_integer() && value.get<int64_t>() >= 0 && value.get<int64_t>() < vocab_size,
                folder + ": " + key + " " + quote_untrusted(value.dump(), 40) + " is not a token of the vocabulary of " +
                    std::to_string(vocab_size));
        return static_cast<int32_t>(value.get<int64_t>());
    };
    SpecialTokens special;
    if (!ids["bos_token_id"].is_null()) special.bos = token(ids["bos_token_id"], "bos_token_id");
    const nlohmann::json& eos = ids["eos_token_id"];
    for (const nlohmann::json& value : eos.is_array() ? eos : nlohmann::json::array({eos}))
        if (!value.is_null()) special.end_of_generation.push_back(token(value, "eos_token_id"));
    bool add_bos = fs::exists(folder + "/tokenizer.model");
    const std::string tokenizer_config_path = folder + "/tokenizer_config.json";
    if (fs::exists(tokenizer_config_path)) {
        const nlohmann::json tokenizer_config = read_json(tokenizer_config_path);
        if (tokenizer_config.contains("add_bos_token") && tokenizer_config.at("add_bos_token").is_boolean())
            add_bos = tokenizer_config.at("add_bos_token").get<bool>();
    }
    special.add_bos = add_bos && special.bos >= 0;
    return special;
}

ImportedHf import_hf_folder(const std::string& folder) {
    ShardSet shards(folder);
    const bool subln = shards.has("model.layers.0.self_attn.attn_sub_norm.weight");
    const std::string config_path = folder + "/config.json";
    const nlohmann::json config_json = read_json(config_path);
    const ModelConfig config = read_config(config_json, config_path, subln);
    const MethodConfig method = read_method(config_json, config_path);
    ImportedHf imported;
    imported.tokenizer = read_tokenizer(folder, config.vocab_size);
    imported.special = read_special_tokens(folder, config_json, config.vocab_size);
    imported.model = std::make_unique<ModelParameters>(config, method);
    ModelParameters& model = *imported.model;
    for (const ParamTensor& tensor : model.layout.tensors) {
        if (tensor.stores_codes()) {
            read_coded_tensor(shards, folder, model, tensor);
            continue;
        }
        const std::string name = hf_tensor_name(tensor.name);
        const std::vector<float> values =
            rows_in_model_order(shards.holding(name, hf_tensor_shape(tensor)).read_f32(name), tensor.rows, tensor.cols,
                                config.head_dim(), hf_rope_permuted(tensor.name));
        std::copy(values.begin(), values.end(), model.value(tensor));
    }
    return imported;
}

}  // namespace dqt
