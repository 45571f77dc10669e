#include "model/config.h"

#include <climits>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <type_traits>

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace dqt {

void ModelConfig::validate() const {
    auto positive = [](const char* name, int value) {
        require(value > 0, std::string("model config: ") + name + " must be positive, got " + std::to_string(value));
    };
    positive("dim", dim);
    positive("n_layers", n_layers);
    positive("n_heads", n_heads);
    positive("n_kv_heads", n_kv_heads);
    positive("ffn_dim", ffn_dim);
    positive("vocab_size", vocab_size);
    positive("seq_len", seq_len);
    require(seq_len <= kMaxSeqLen, "model config: seq_len must be at most " + std::to_string(kMaxSeqLen) + ", got " +
                                       std::to_string(seq_len));
    require(dim % n_heads == 0, "model config: n_heads (" + std::to_string(n_heads) + ") must divide dim (" +
                                    std::to_string(dim) + ")");
    require(n_heads % n_kv_heads == 0, "model config: n_kv_heads (" + std::to_string(n_kv_heads) +
                                           ") must divide n_heads (" + std::to_string(n_heads) + ")");
    require(head_dim() % 2 == 0, "model config: head_dim = dim / n_heads must be even for rotary embeddings, got " +
                                     std::to_string(head_dim()));
    auto positive_finite = [](const char* name, float value) {
        require(std::isfinite(value) && value > 0, std::string("model config: ") + name +
                                                       " must be a positive finite number, got " + format_number(value));
    };
    positive_finite("rope_theta", rope_theta);
    positive_finite("norm_eps", norm_eps);
    positive_finite("init_std", init_std);
}

int64_t ModelConfig::parameter_count() const {
    const int64_t C = dim, F = ffn_dim, V = vocab_size, KV = kv_dim();
    int64_t per_layer = C * C * 2 + C * KV * 2 + 3 * C * F + 2 * C;
    if (subln) per_layer += C + F;
    return V * C * (tie_embeddings ? 1 : 2) + n_layers * per_layer + C;
}

double ModelConfig::train_flops_per_token() const {
    const double C = dim, F = ffn_dim, V = vocab_size, KV = kv_dim();
    const double matmul_weights = n_layers * (C * C * 2 + C * KV * 2 + 3 * C * F) + V * C;
    // Causal attention: QK^T and PV each 2*C*T/2 multiply-adds per token on average, x3 for backward.
    const double attention = n_layers * 6.0 * C * seq_len;
    return 6.0 * matmul_weights + attention;
}

void to_json(nlohmann::json& j, const ModelConfig& c) {
    j = nlohmann::json{{"dim", c.dim},           {"n_layers", c.n_layers},     {"n_heads", c.n_heads},
                       {"n_kv_heads", c.n_kv_heads}, {"ffn_dim", c.ffn_dim},   {"vocab_size", c.vocab_size},
                       {"seq_len", c.seq_len},   {"subln", c.subln},           {"rope_theta", c.rope_theta},
                       {"norm_eps", c.norm_eps}, {"init_std", c.init_std},   {"tie_embeddings", c.tie_embeddings},
                       {"ffn_activation", gated_activation_name(c.ffn_activation)}};
}

namespace {

// An int field read exactly: nlohmann's get<int>() would turn 64.9 into 64 and 4294967360 into
// 64 without a word.
int exact_int(const nlohmann::json& j, const char* key) {
    const nlohmann::json& value = j.at(key);
    require(value.is_number_integer(), std::string("model config: ") + key + " must be a whole number, got " +
                                           quote_untrusted(value.dump()));
    const bool fits = value.is_number_unsigned() ? value.get<uint64_t>() <= INT32_MAX
                                                 : value.get<int64_t>() >= INT32_MIN && value.get<int64_t>() <= INT32_MAX;
    require(fits, std::string("model config: ") + key + " = " + quote_untrusted(value.dump()) + " is out of range");
    return value.get<int>();
}

// A number, boolean or string field: one that holds another type is named with what it holds.
template <typename T>
T typed(const nlohmann::json& j, const char* key) {
    const nlohmann::json& value = j.at(key);
    const char* expected = std::is_same_v<T, bool> ? "true or false" : std::is_same_v<T, std::string> ? "a string" : "a number";
    const bool fits = std::is_same_v<T, bool> ? value.is_boolean()
                      : std::is_same_v<T, std::string> ? value.is_string()
                                                      : value.is_number();
    require(fits, std::string("model config: ") + key + " must be " + expected + ", got " + quote_untrusted(value.dump()));
    return value.get<T>();
}

}  // namespace

void from_json(const nlohmann::json& j, ModelConfig& c) {
    static const std::set<std::string> known = {"dim",     "n_layers",   "n_heads",    "n_kv_heads",
                                                "ffn_dim", "vocab_size", "seq_len",    "subln",
                                                "rope_theta", "norm_eps", "init_std", "tie_embeddings",
                                                "ffn_activation"};
    require(j.is_object(), "model config: expected a JSON object");
    for (const auto& [key, value] : j.items()) {
        require(known.count(key) == 1, "model config: unknown key " + quote_untrusted(key));
    }
    if (j.contains("dim")) c.dim = exact_int(j, "dim");
    if (j.contains("n_layers")) c.n_layers = exact_int(j, "n_layers");
    if (j.contains("n_heads")) c.n_heads = exact_int(j, "n_heads");
    c.n_kv_heads = j.contains("n_kv_heads") ? exact_int(j, "n_kv_heads") : c.n_heads;
    if (j.contains("ffn_dim")) c.ffn_dim = exact_int(j, "ffn_dim");
    if (j.contains("vocab_size")) c.vocab_size = exact_int(j, "vocab_size");
    if (j.contains("seq_len")) c.seq_len = exact_int(j, "seq_len");
    if (j.contains("subln")) c.subln = typed<bool>(j, "subln");
    if (j.contains("rope_theta")) c.rope_theta = typed<float>(j, "rope_theta");
    if (j.contains("norm_eps")) c.norm_eps = typed<float>(j, "norm_eps");
    if (j.contains("init_std")) c.init_std = typed<float>(j, "init_std");
    if (j.contains("tie_embeddings")) c.tie_embeddings = typed<bool>(j, "tie_embeddings");
    if (j.contains("ffn_activation")) c.ffn_activation = parse_gated_activation(typed<std::string>(j, "ffn_activation"));
}

nlohmann::json load_model_config_json(const std::string& path) {
    std::error_code error;  // checked before opening: opening a FIFO waits for a writer
    require(std::filesystem::is_regular_file(path, error), "cannot read model config " + path + ": not a regular file");
    std::ifstream file(path);
    require(file.good(), "cannot open model config " + path);
    nlohmann::json j;
    try {
        j = nlohmann::json::parse(file);
    } catch (const nlohmann::json::exception&) {
        throw Error("model config " + path + " is not valid JSON");
    }
    require(j.is_object(), "model config " + path + " must be a JSON object");
    return j;
}

}  // namespace dqt
