#include "export/llamacpp_gguf.h"

#include <cmath>
#include <cstring>
#include <set>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "data/byte_level_bpe.h"
#include "data/byte_level_bpe_parts.h"
#include "data/byte_symbols.h"
#include "data/sentencepiece_proto.h"
#include "export/gguf_source.h"
#include "export/ternary_blocks.h"
#include "quant/codes.h"
#include "quant/f16.h"

namespace dqt {

namespace {

class FileKeys {
public:
    explicit FileKeys(const GgufReader& reader) : reader_(reader) {}

    std::string where() const { return "GGUF file " + reader_.path(); }
    int positive(const std::string& key, int limit) const {
        const uint32_t value = reader_.u32(key);
        require(value >= 1 && value <= static_cast<uint32_t>(limit),
                where() + ": " + key + " = " + std::to_string(value) + " is out of range (1 to " +
                    std::to_string(limit) + ")");
        return static_cast<int>(value);
    }
    int positive_or(const std::string& key, int fallback, int limit) const {
        return reader_.find(key) ? positive(key, limit) : fallback;
    }
    float f32_or(const std::string& key, float fallback) const { return reader_.find(key) ? reader_.f32(key) : fallback; }
    bool flag_or(const std::string& key, bool fallback) const {
        const GgufValue* value = reader_.find(key);
        if (value == nullptr) return fallback;
        require(value->type == GgufValueType::boolean, where() + ": " + key + " should be a boolean");
        return value->value.get<bool>();
    }
    const GgufValue& array(const std::string& key, GgufValueType element) const {
        const GgufValue* value = reader_.find(key);
        require(value != nullptr && value->type == GgufValueType::array && value->element_type == element,
                where() + ": " + key + " is missing or not an array of the expected type");
        return *value;
    }

private:
    const GgufReader& reader_;
};

ModelConfig read_config(const GgufReader& reader, const FileKeys& keys) {
    const std::string arch = reader.string("general.architecture");
    require(arch == "llama", keys.where() + ": architecture " + quote_untrusted(arch) +
                                 " is not read (dqt reads llama.cpp's `llama` graph and its own exports)");
    const GgufValue* scaling = reader.find("llama.rope.scaling.type");
    require(scaling == nullptr || (scaling->type == GgufValueType::string && scaling->value == "none"),
            keys.where() + ": rope scaling (llama.rope.scaling.type) is not supported");
    ModelConfig c;
    c.dim = keys.positive("llama.embedding_length", 1 << 16);
    c.n_layers = keys.positive("llama.block_count", 1 << 10);
    c.n_heads = keys.positive("llama.attention.head_count", 1 << 10);
    c.n_kv_heads = keys.positive_or("llama.attention.head_count_kv", c.n_heads, 1 << 10);
    c.ffn_dim = keys.positive("llama.feed_forward_length", 1 << 18);
    c.seq_len = keys.positive("llama.context_length", kMaxSeqLen);
    c.rope_theta = keys.f32_or("llama.rope.freq_base", 10000.0f);
    c.norm_eps = keys.f32_or("llama.attention.layer_norm_rms_epsilon", 1e-5f);
    c.subln = false;
    c.ffn_activation = GatedActivation::silu;
    c.tie_embeddings = reader.find_tensor("output.weight") == nullptr;
    const GgufReader::TensorInfo* table = reader.find_tensor("token_embd.weight");
    require(table != nullptr && table->ne.size() == 2, keys.where() + " lacks the matrix token_embd.weight");
    require(table->ne[1] >= 1 && table->ne[1] <= (int64_t{1} << 20),
            keys.where() + ": token_embd.weight's vocabulary size is out of range");
    c.vocab_size = static_cast<int>(table->ne[1]);
    c.validate();
    require(keys.positive_or("llama.rope.dimension_count", c.head_dim(), 1 << 16) == c.head_dim(),
            keys.where() + ": llama.rope.dimension_count is not the head size (partial rotary is not supported)");
    return c;
}

// Element values of a (rows, cols) tensor as stored: codes and block scales for the block types.
BlockCodes read_blocks(const GgufReader& reader, const GgufReader::TensorInfo& info, int rows, int cols) {
    const std::vector<uint8_t> data = reader.read(info);
    const std::string what = reader.path() + " " + quote_untrusted(info.name);
    switch (info.type) {
        case GgmlType::tq2_0: return decode_tq2_0_blocks(data.data(), rows, cols, what);
        case GgmlType::tq1_0: return decode_tq1_0_blocks(data.data(), rows, cols);
        case GgmlType::q8_0: return decode_q8_0_blocks(data.data(), rows, cols);
        case GgmlType::f32:
        case GgmlType::f16: break;
    }
    throw Error("GGUF file " + reader.path() + ": " + quote_untrusted(info.name) + " holds no blocks");
}

std::vector<float> read_tensor_values(const GgufReader& reader, const GgufReader::TensorInfo& info, int rows, int cols) {
    const size_t count = static_cast<size_t>(rows) * cols;
    std::vector<float> values(count);
    if (info.type == GgmlType::f32 || info.type == GgmlType::f16) {
        const std::vector<uint8_t> data = reader.read(info);
        for (size_t i = 0; i < count; ++i) {
            if (info.type == GgmlType::f32) {
                std::memcpy(&values[i], data.data() + 4 * i, 4);
            } else {
                uint16_t half;
                std::memcpy(&half, data.data() + 2 * i, 2);
                values[i] = f16_to_float(half);
            }
        }
        return values;
    }
    const BlockCodes blocks = read_blocks(reader, info, rows, cols);
    const size_t block = count / blocks.block_scales.size();
    for (size_t i = 0; i < count; ++i) values[i] = blocks.codes[i] * blocks.block_scales[i / block];
    return values;
}

// The one scale d of a ternary tensor's non-zero blocks, or 0 when it is not ternary with one
// scale (another type, scales that differ, or every block zero).
float single_ternary_scale(const GgufReader& reader, const GgufReader::TensorInfo& info, int rows, int cols) {
    if (info.type != GgmlType::tq1_0 && info.type != GgmlType::tq2_0) return 0.0f;
    const BlockCodes blocks = read_blocks(reader, info, rows, cols);
    float scale = 0.0f;
    for (float d : blocks.block_scales) {
        if (d == 0.0f) continue;
        if (scale == 0.0f) scale = d;
        if (d != scale || !(d > 0.0f) || !std::isfinite(d)) return 0.0f;
    }
    return scale;
}

// tokenizer.ggml.token_type (optional: every token normal), one entry per token.
std::vector<int> token_types(const GgufReader& reader, const FileKeys& keys, size_t count) {
    const GgufValue* types = reader.find("tokenizer.ggml.token_type");
    if (types == nullptr) return std::vector<int>(count, 1);
    require(types->type == GgufValueType::array && types->element_type == GgufValueType::int32 &&
                types->value.size() == count,
            keys.where() + ": tokenizer.ggml.token_type does not match tokenizer.ggml.tokens");
    std::vector<int> out(count);
    for (size_t id = 0; id < count; ++id) {
        out[id] = types->value[id].get<int>();
        require(out[id] >= 0 && out[id] <= 6,
                keys.where() + ": tokenizer.ggml.token_type has the unknown type " + std::to_string(out[id]));
    }
    return out;
}

// "llama": sentencepiece BPE over the pieces, as llama.cpp's SPM tokenizer runs it.
std::unique_ptr<Tokenizer> read_sentencepiece(const GgufReader& reader, const FileKeys& keys,
                                              const std::vector<std::string>& tokens) {
    require(!keys.flag_or("tokenizer.ggml.remove_extra_whitespaces", false),
            keys.where() + ": its tokenizer folds runs of spaces (tokenizer.ggml.remove_extra_whitespaces), so it "
                           "cannot give back the text it encodes: dqt does not read it");
    const GgufValue* scores = reader.find("tokenizer.ggml.scores");
    require(scores == nullptr || (scores->type == GgufValueType::array &&
                                  scores->element_type == GgufValueType::float32 && scores->value.size() == tokens.size()),
            keys.where() + ": tokenizer.ggml.scores does not match tokenizer.ggml.tokens");
    const std::vector<int> types = token_types(reader, keys, tokens.size());
    std::vector<SentencepiecePiece> pieces(tokens.size());
    for (size_t id = 0; id < pieces.size(); ++id) {
        pieces[id].piece = tokens[id];
        if (scores) pieces[id].score = scores->value[id].get<float>();
        pieces[id].type = types[id] == 0 ? 1 : types[id];  // llama.cpp's "undefined" is a normal piece
    }
    // llama.cpp puts a space before the text unless the file says not to (LLaMA's dummy prefix).
    SentencepieceNormalizer normalizer;
    normalizer.add_dummy_prefix = keys.flag_or("tokenizer.ggml.add_space_prefix", true);
    return load_tokenizer("bpe", sentencepiece_bpe_proto(pieces, normalizer));
}

// "gpt2": byte-level BPE; llama.cpp names the pre-tokenizer, and two names have a regex here.
std::unique_ptr<Tokenizer> read_byte_level_bpe(const GgufReader& reader, const FileKeys& keys,
                                               const std::vector<std::string>& tokens) {
    const GgufValue* merges = reader.find("tokenizer.ggml.merges");
    require(merges == nullptr ||
                (merges->type == GgufValueType::array && merges->element_type == GgufValueType::string),
            keys.where() + ": tokenizer.ggml.merges is not a list of strings");
    ByteLevelBpeParts parts;
    if (merges) parts.merges = merges->value.get<std::vector<std::string>>();
    const std::vector<int> types = token_types(reader, keys, tokens.size());
    for (size_t id = 0; id < tokens.size(); ++id)
        parts.tokens.push_back({tokens[id], types[id] == 3 || types[id] == 4, types[id] == 3});
    // The 256 byte symbols in order and no merges: dqt's byte tokenizer, whatever the pre-tokenizer.
    bool bytes = parts.merges.empty() && tokens.size() == 256;
    for (size_t b = 0; bytes && b < 256; ++b) bytes = tokens[b] == gpt2_byte_symbol(static_cast<int>(b));
    if (bytes) return make_byte_tokenizer();
    const std::string pre = reader.find("tokenizer.ggml.pre") ? reader.string("tokenizer.ggml.pre") : "default";
    if (pre == "llama-bpe" || pre == "llama3" || pre == "llama-v3") {
        parts.pre = ByteLevelBpeParts::PreTokenizer::split;
        parts.split_regex = kLlama3PreTokenizerRegex;
        parts.ignore_merges = true;
    } else if (pre == "gpt-2") {
        parts.pre = ByteLevelBpeParts::PreTokenizer::gpt2;
    } else {
        throw Error(keys.where() + ": tokenizer.ggml.pre " + quote_untrusted(pre) +
                    " is not read (dqt knows the byte-level pre-tokenizers llama-bpe and gpt-2)");
    }
    return load_byte_level_bpe(byte_level_bpe_json(parts), keys.where());
}

std::unique_ptr<Tokenizer> read_tokenizer(const GgufReader& reader, const FileKeys& keys, int vocab_size) {
    const std::string model = reader.string("tokenizer.ggml.model");
    require(model == "llama" || model == "gpt2", keys.where() + ": tokenizer.ggml.model " + quote_untrusted(model) +
                                                     " is not read (dqt reads \"llama\" and \"gpt2\" vocabularies)");
    const GgufValue& list = keys.array("tokenizer.ggml.tokens", GgufValueType::string);
    require(list.value.size() == static_cast<size_t>(vocab_size),
            keys.where() + ": tokenizer.ggml.tokens has " + std::to_string(list.value.size()) +
                " entries where token_embd has " + std::to_string(vocab_size) + " rows");
    const auto tokens = list.value.get<std::vector<std::string>>();
    try {
        return model == "llama" ? read_sentencepiece(reader, keys, tokens) : read_byte_level_bpe(reader, keys, tokens);
    } catch (const nlohmann::json::exception& e) {  // a token that is not UTF-8 cannot go into tokenizer.json
        throw Error(keys.where() + ": its tokenizer cannot be read (" + quote_untrusted(e.what(), 120) + ")");
    } catch (const Error& e) {
        if (std::string(e.what()).starts_with(keys.where())) throw;
        throw Error(keys.where() + ": its tokenizer cannot be read (" + std::string(e.what()) + ")");
    }
}

// BOS and the end-of-generation tokens as llama.cpp reads them from the keys: a BOS before
// every prompt by default for sentencepiece and LLaMA 3's byte-level vocabularies (unless
// add_bos_token says otherwise); EOS, end-of-turn and end-of-message end a generation. An id
// outside the vocabulary is ignored, as llama.cpp ignores it.
SpecialTokens read_special_tokens(const GgufReader& reader, const FileKeys& keys, int vocab_size) {
    auto id = [&](const std::string& key) -> int32_t {
        const GgufValue* value = reader.find(key);
        if (value == nullptr || value->type != GgufValueType::uint32) return -1;
        const uint32_t token = value->value.get<uint32_t>();
        return token < static_cast<uint32_t>(vocab_size) ? static_cast<int32_t>(token) : -1;
    };
    SpecialTokens special;
    special.bos = id("tokenizer.ggml.bos_token_id");
    const std::string model = reader.string("tokenizer.ggml.model");
    const std::string pre = reader.find("tokenizer.ggml.pre") ? reader.string("tokenizer.ggml.pre") : "";
    const bool bos_by_default = model == "llama" || pre == "llama-bpe" || pre == "llama3" || pre == "llama-v3";
    special.add_bos = special.bos >= 0 && keys.flag_or("tokenizer.ggml.add_bos_token", bos_by_default);
    for (const char* key :
         {"tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"}) {
        const int32_t token = id(key);
        if (token >= 0 && !special.ends_generation(token)) special.end_of_generation.push_back(token);
    }
    return special;
}

}  // namespace

namespace {

// The file's tensors as the model ModelConfig and MethodConfig describe: a ternary one's block
// linears as codes with scale 1/d, everything else as the values the blocks hold.
class LlamacppGgufSource : public GgufSource {
public:
    LlamacppGgufSource(GgufReader reader, const ModelConfig& c, const MethodConfig& method,
                       std::vector<float> ternary_scales)
        : GgufSource(std::move(reader), c, method), ternary_scales_(std::move(ternary_scales)) {}

    void read_values(const ParamTensor& t, float* out) const override {
        const std::vector<float> values = read_tensor_values(reader_, info(t), t.rows, t.cols);
        std::memcpy(out, values.data(), values.size() * sizeof(float));
    }

    IntegerScales read_integers(const ParamTensor& t, int8_t* q) const override {
        const BlockCodes blocks = read_blocks(reader_, info(t), t.rows, t.cols);
        const size_t block = t.count() / blocks.block_scales.size();
        for (size_t i = 0; i < t.count(); ++i) q[i] = blocks.block_scales[i / block] == 0.0f ? 0 : blocks.codes[i];
        return integer_scales(t);
    }

private:
    IntegerScales integer_scales(const ParamTensor& t) const override {
        const float code_scale = 1.0f / ternary_block_scale(t);  // W = q / scale
        return {1.0f / code_scale, code_scale};
    }
    float ternary_block_scale(const ParamTensor& t) const override {
        return ternary_scales_[static_cast<size_t>(t.tensor_id)];
    }

    std::vector<float> ternary_scales_;  // per tensor id: d of a ternary block linear
};

}  // namespace

OpenedGguf open_llamacpp_gguf(GgufReader reader) {
    const FileKeys keys(reader);
    const ModelConfig c = read_config(reader, keys);
    // Every tensor the config implies is in the file with its shape, and nothing else is.
    const ParamLayout fp_layout = make_param_layout(c, MethodConfig{});
    std::set<std::string> expected;
    for (const ParamTensor& t : fp_layout.tensors) {
        const std::string name = t.name + ".weight";
        const GgufReader::TensorInfo* info = reader.find_tensor(name);
        require(info != nullptr, keys.where() + " lacks the tensor " + name);
        require(info->ne == gguf_shape(t), keys.where() + ": tensor " + name + " has the wrong shape");
        expected.insert(name);
    }
    for (const GgufReader::TensorInfo& info : reader.tensors())
        require(expected.count(info.name) == 1, keys.where() + " holds the tensor " + quote_untrusted(info.name) +
                                                    ", for which dqt's LLaMA model has no place");

    // Ternary with one scale per block linear: read as ternary dqt.
    std::vector<float> ternary_scales(fp_layout.tensors.size(), 0.0f);
    bool ternary = true;
    for (const ParamTensor& t : fp_layout.tensors) {
        if (t.role != TensorRole::block_linear) continue;
        const float d = single_ternary_scale(reader, *reader.find_tensor(t.name + ".weight"), t.rows, t.cols);
        ternary_scales[static_cast<size_t>(t.tensor_id)] = d;
        ternary = ternary && d > 0.0f;
    }
    MethodConfig method;
    if (ternary) method.kind = Method::dqt;  // the default grid is ternary; embedding and head stay fp

    OpenedGguf opened;
    opened.tokenizer = read_tokenizer(reader, keys, c.vocab_size);
    opened.special = read_special_tokens(reader, keys, c.vocab_size);
    opened.tensors = std::make_unique<LlamacppGgufSource>(std::move(reader), c, method, std::move(ternary_scales));
    return opened;
}

}  // namespace dqt
