#include "export/gguf_model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>

#include <nlohmann/json.hpp>
#include <sentencepiece_processor.h>

#include "core/error.h"
#include "data/chat_template.h"
#include "data/byte_level_bpe_parts.h"
#include "data/byte_symbols.h"
#include "export/llamacpp_gguf.h"
#include "export/rope_rows.h"
#include "export/ternary_blocks.h"
#include "export/gguf_source.h"
#include "io/gguf.h"
#include "model/ternary_convert.h"
#include "quant/codes.h"
#include "quant/f16.h"

namespace dqt {

namespace {

// ---- architecture -------------------------------------------------------------------------

std::string architecture_of(const ModelConfig& c) {
    if (!c.subln) return "llama";
    require(c.tie_embeddings,
            "llama.cpp's graph with SubLN norms (bitnet) reads its output head from token_embd, but this model has a "
            "separate lm_head (trained with --untie-embeddings): train without it (tied is the default), or with "
            "--no-subln for the llama graph, or export it with --format safetensors");
    return "bitnet";
}

bool rope_permuted(const std::string& arch, const std::string& name) {
    if (arch != "bitnet") return false;
    return name.ends_with(".attn_q") || name.ends_with(".attn_k");
}

template <typename T>
std::vector<uint8_t> as_bytes(const std::vector<T>& values) {
    std::vector<uint8_t> bytes(values.size() * sizeof(T));
    std::memcpy(bytes.data(), values.data(), bytes.size());
    return bytes;
}

// ---- tokenizer ----------------------------------------------------------------------------

// A tokenizer.json's byte-level BPE as llama.cpp's "gpt2" vocabulary, which names its
// pre-tokenizer instead of holding the regex: LLaMA 3's ("llama-bpe", whole pre-tokens that are
// tokens kept whole) and GPT-2's ("gpt-2") have names; others are refused. EOS and BOS are the
// byte-0 symbol's token, as for the byte vocabulary: a tokenizer.json does not say which added
// token ends a text.
void write_byte_level_bpe(GgufWriter& out, const Tokenizer& tokenizer) {
    const ByteLevelBpeParts parts = byte_level_bpe_parts(tokenizer);
    std::string pre;
    if (parts.pre == ByteLevelBpeParts::PreTokenizer::gpt2 && !parts.ignore_merges) pre = "gpt-2";
    if (parts.pre == ByteLevelBpeParts::PreTokenizer::split && parts.split_regex == kLlama3PreTokenizerRegex &&
        parts.ignore_merges)
        pre = "llama-bpe";
    require(!pre.empty(),
            "export: the tokenizer's pre-tokenizer is neither LLaMA 3's nor GPT-2's, the byte-level ones llama.cpp knows "
            "by name: export with --format safetensors");
    std::vector<std::string> tokens;
    std::vector<int32_t> types;  // llama.cpp: 1 normal, 3 control (a special added token), 4 user defined
    int32_t nul = -1;
    for (size_t id = 0; id < parts.tokens.size(); ++id) {
        const ByteLevelBpeParts::Token& token = parts.tokens[id];
        tokens.push_back(token.text);
        types.push_back(!token.added ? 1 : token.special ? 3 : 4);
        if (!token.added && token.text == gpt2_byte_symbol(0)) nul = static_cast<int32_t>(id);
    }
    require(nul >= 0, "export: the tokenizer has no token for byte 0");
    out.set_string("tokenizer.ggml.model", "gpt2");
    out.set_string("tokenizer.ggml.pre", pre);
    out.set_strings("tokenizer.ggml.tokens", tokens);
    out.set_i32s("tokenizer.ggml.token_type", types);
    out.set_strings("tokenizer.ggml.merges", parts.merges);
    out.set_u32("tokenizer.ggml.bos_token_id", static_cast<uint32_t>(nul));
    out.set_u32("tokenizer.ggml.eos_token_id", static_cast<uint32_t>(nul));
}

void write_tokenizer(GgufWriter& out, const Tokenizer& tokenizer) {
    out.set_string("dqt.tokenizer.kind", tokenizer.kind());
    out.set_bytes("dqt.tokenizer.data", tokenizer.serialize());
    out.set_string("tokenizer.chat_template", kChatTemplateJinja);
    out.set_bool("tokenizer.ggml.add_bos_token", false);  // dqt feeds no BOS token
    out.set_bool("tokenizer.ggml.add_eos_token", false);
    if (tokenizer.kind() == "byte") {
        // Token = byte: a "gpt2" vocabulary of the 256 byte symbols and no merges. The "qwen2"
        // pre-tokenizer keeps detokenization lossless ("default" cleans up spaces before
        // punctuation). EOS must be some token: byte 0, which text does not contain.
        std::vector<std::string> tokens;
        for (int b = 0; b < 256; ++b) tokens.push_back(gpt2_byte_symbol(b));
        out.set_string("tokenizer.ggml.model", "gpt2");
        out.set_string("tokenizer.ggml.pre", "qwen2");
        out.set_strings("tokenizer.ggml.tokens", tokens);
        out.set_i32s("tokenizer.ggml.token_type", std::vector<int32_t>(256, 1));
        out.set_strings("tokenizer.ggml.merges", {});
        out.set_u32("tokenizer.ggml.bos_token_id", 0);
        out.set_u32("tokenizer.ggml.eos_token_id", 0);
        return;
    }
    if (tokenizer.kind() == "byte-level-bpe") return write_byte_level_bpe(out, tokenizer);
    // sentencepiece BPE: llama.cpp's "llama" (SPM) tokenizer merges by piece score as
    // sentencepiece does and falls back to the <0xXX> byte pieces.
    sentencepiece::SentencePieceProcessor processor;
    require(processor.LoadFromSerializedProto(tokenizer.serialize()).ok(), "export: the model's tokenizer is unreadable");
    std::vector<std::string> tokens;
    std::vector<float> scores;
    std::vector<int32_t> types;  // llama.cpp: 1 normal, 2 unknown, 3 control, 5 unused, 6 byte
    for (int id = 0; id < processor.GetPieceSize(); ++id) {
        tokens.push_back(processor.IdToPiece(id));
        scores.push_back(processor.GetScore(id));
        int type = 1;
        if (processor.IsUnknown(id)) {
            type = 2;
        } else if (processor.IsControl(id)) {
            type = 3;
        } else if (processor.IsUnused(id)) {
            type = 5;
        } else if (processor.IsByte(id)) {
            type = 6;
        }
        types.push_back(type);
    }
    out.set_string("tokenizer.ggml.model", "llama");
    out.set_strings("tokenizer.ggml.tokens", tokens);
    out.set_f32s("tokenizer.ggml.scores", scores);
    out.set_i32s("tokenizer.ggml.token_type", types);
    // The special ids are the sentencepiece model's own. dqt trains it with bos_id = eos_id =
    // -1 (documents are joined by "\n\n" text, data/dataset.h), so it has <unk> (id 0) and no
    // BOS or EOS piece. llama.cpp's SPM vocabulary cannot say "none": an absent or out-of-range
    // id leaves its defaults 1 and 2, here the byte pieces <0x00> and <0x01>. A missing BOS or
    // EOS is therefore written as <0x00> (byte 0, as in the byte vocabulary): llama.cpp ends
    // generation on it, but ordinary text holds no NUL, so the model does not produce it and a
    // client stops at its token limit or a stop string (docs/FORMATS.md, "Tokenizers").
    const int unknown = processor.unk_id();  // sentencepiece always has one
    const int nul = processor.PieceToId("<0x00>");
    require(processor.IsByte(nul), "export: the tokenizer has no <0x00> byte piece");
    const int bos = processor.bos_id() >= 0 ? processor.bos_id() : nul;
    const int eos = processor.eos_id() >= 0 ? processor.eos_id() : nul;
    out.set_u32("tokenizer.ggml.unknown_token_id", static_cast<uint32_t>(unknown));
    out.set_u32("tokenizer.ggml.bos_token_id", static_cast<uint32_t>(bos));
    out.set_u32("tokenizer.ggml.eos_token_id", static_cast<uint32_t>(eos));
    // dqt trains without a dummy prefix; a model imported with one (LLaMA's) keeps it.
    const std::vector<int32_t> probe = tokenizer.encode("a");
    out.set_bool("tokenizer.ggml.add_space_prefix", tokenizer.decode(probe) == " a");
}

// An imported model's special tokens replace the tokenizer's stand-ins (byte 0): llama.cpp
// starts prompts with BOS when add_bos_token says so and ends generation at EOS and EOT; dqt
// reads them back from dqt.special_tokens.
void write_special_tokens(GgufWriter& out, const SpecialTokens& special, int vocab_size) {
    if (special.empty()) return;
    special.check(vocab_size, "export");
    if (special.bos >= 0) out.set_u32("tokenizer.ggml.bos_token_id", static_cast<uint32_t>(special.bos));
    out.set_bool("tokenizer.ggml.add_bos_token", special.add_bos);
    const std::vector<int32_t>& ends = special.end_of_generation;
    if (!ends.empty()) out.set_u32("tokenizer.ggml.eos_token_id", static_cast<uint32_t>(ends[0]));
    if (ends.size() > 1) out.set_u32("tokenizer.ggml.eot_token_id", static_cast<uint32_t>(ends[1]));
    out.set_string("dqt.special_tokens", nlohmann::json(special).dump());
}

// ---- tensors ------------------------------------------------------------------------------

GgufTensor float_tensor(const std::string& name, std::vector<int64_t> ne, const std::vector<float>& values,
                        GgufFloatFormat format) {
    GgufTensor tensor{name, std::move(ne), GgmlType::f32, {}};
    if (format == GgufFloatFormat::f16) {
        std::vector<uint16_t> halves(values.size());
        for (size_t i = 0; i < values.size(); ++i) halves[i] = float_to_f16(values[i]);
        tensor.type = GgmlType::f16;
        tensor.data = as_bytes(halves);
    } else {
        tensor.data = as_bytes(values);
    }
    return tensor;
}

// Integer codes (rows, cols) of a block linear, in the densest type llama.cpp accepts.
GgufTensor code_tensor(const std::string& name, const ParamTensor& t, const std::vector<int8_t>& codes, bool ternary,
                       const GgufExportOptions& options, int& fallbacks) {
    GgufTensor tensor{name, gguf_shape(t), GgmlType::f32, {}};
    if (ternary && t.cols % 256 == 0) {
        tensor.type = options.ternary == GgufTernaryFormat::tq2_0 ? GgmlType::tq2_0 : GgmlType::tq1_0;
        tensor.data = tensor.type == GgmlType::tq2_0 ? encode_tq2_0(codes.data(), t.rows, t.cols)
                                                     : encode_tq1_0(codes.data(), t.rows, t.cols);
    } else if (!ternary && t.cols % 32 == 0) {
        tensor.type = GgmlType::q8_0;
        tensor.data = encode_q8_0_unit_scale(codes.data(), t.rows, t.cols);
    } else {
        if (ternary) ++fallbacks;
        std::vector<float> values(codes.begin(), codes.end());
        tensor.data = as_bytes(values);
    }
    return tensor;
}

std::vector<int8_t> decode_codes(const GgufReader& reader, const GgufReader::TensorInfo& info, int rows, int cols) {
    const std::vector<uint8_t> data = reader.read(info);
    const size_t count = static_cast<size_t>(rows) * cols;
    switch (info.type) {
        case GgmlType::tq2_0: return decode_tq2_0(data.data(), rows, cols);
        case GgmlType::tq1_0: return decode_tq1_0(data.data(), rows, cols);
        case GgmlType::q8_0: return decode_q8_0_unit_scale(data.data(), rows, cols, reader.path() + " " + info.name);
        case GgmlType::f32: {
            std::vector<int8_t> codes(count);
            for (size_t i = 0; i < count; ++i) {
                float value;
                std::memcpy(&value, data.data() + 4 * i, 4);
                if (value != std::nearbyint(value) || value < -128.0f || value > 127.0f)
                    throw Error("GGUF file " + reader.path() + ": " + quote_untrusted(info.name) + " should hold integer codes");
                codes[i] = static_cast<int8_t>(value);
            }
            return codes;
        }
        case GgmlType::f16: break;
    }
    throw Error("GGUF file " + reader.path() + ": " + quote_untrusted(info.name) + " has a type that cannot hold codes");
}

std::vector<float> decode_floats(const GgufReader& reader, const GgufReader::TensorInfo& info, size_t count) {
    const std::vector<uint8_t> data = reader.read(info);
    std::vector<float> values(count);
    if (info.type == GgmlType::f32) {
        std::memcpy(values.data(), data.data(), count * 4);
    } else if (info.type == GgmlType::f16) {
        for (size_t i = 0; i < count; ++i) {
            uint16_t half;
            std::memcpy(&half, data.data() + 2 * i, 2);
            values[i] = f16_to_float(half);
        }
    } else {
        throw Error("GGUF file " + reader.path() + ": " + quote_untrusted(info.name) + " should be F32 or F16, it is " +
                    ggml_type_name(info.type));
    }
    return values;
}

// llama.cpp's llama_ftype (include/llama.h) for a file whose weights are mostly `type`.
uint32_t llama_ftype_of(GgmlType type) {
    switch (type) {
        case GgmlType::f32: return 0;     // LLAMA_FTYPE_ALL_F32
        case GgmlType::f16: return 1;     // LLAMA_FTYPE_MOSTLY_F16
        case GgmlType::q8_0: return 7;    // LLAMA_FTYPE_MOSTLY_Q8_0
        case GgmlType::tq1_0: return 36;  // LLAMA_FTYPE_MOSTLY_TQ1_0
        case GgmlType::tq2_0: return 37;  // LLAMA_FTYPE_MOSTLY_TQ2_0
    }
    throw Error("export: no llama.cpp file type for tensor type " + std::string(ggml_type_name(type)));
}

// The type that holds the most block-linear weights (by weight count; a tie goes to the
// lower ggml type number). Without general.file_type llama.cpp guesses from tensor counts,
// where the F32 norms and scale tensors outnumber the weights: a TQ2_0 export reads "all F32".
GgmlType dominant_type(const std::map<GgmlType, size_t>& weights_by_type) {
    GgmlType best = GgmlType::f32;
    size_t best_count = 0;
    for (const auto& [type, count] : weights_by_type) {
        if (count > best_count) best = type, best_count = count;
    }
    return best;
}

}  // namespace

GgufExportSummary export_gguf(const ModelParameters& source, const Tokenizer& tokenizer,
                              const GgufExportOptions& options, const std::string& path) {
    // bitnet's inference weights are the absmean ternarization of its latents.
    std::unique_ptr<ModelParameters> converted;
    if (source.method.kind == Method::bitnet) converted = convert_to_ternary(source);
    const ModelParameters& model = converted ? *converted : source;
    const ModelConfig& c = model.config;
    require(tokenizer.vocab_size() == c.vocab_size, "export: the tokenizer's vocabulary does not match the model's");
    require(c.ffn_activation == GatedActivation::silu,
            "export: the model's FFN is ReLU^2-GLU, and the llama.cpp graphs dqt writes for (llama, bitnet) gate "
            "with SiLU: such a model cannot be exported yet");

    GgufExportSummary summary;
    summary.architecture = architecture_of(c);
    const std::string& arch = summary.architecture;
    GgufWriter out;
    out.set_string("general.architecture", arch);
    out.set_string("general.name", "dqt " + source.method.label());
    out.set_u32(arch + ".context_length", static_cast<uint32_t>(c.seq_len));
    out.set_u32(arch + ".embedding_length", static_cast<uint32_t>(c.dim));
    out.set_u32(arch + ".block_count", static_cast<uint32_t>(c.n_layers));
    out.set_u32(arch + ".feed_forward_length", static_cast<uint32_t>(c.ffn_dim));
    out.set_u32(arch + ".attention.head_count", static_cast<uint32_t>(c.n_heads));
    out.set_u32(arch + ".attention.head_count_kv", static_cast<uint32_t>(c.n_kv_heads));
    out.set_u32(arch + ".rope.dimension_count", static_cast<uint32_t>(c.head_dim()));
    out.set_f32(arch + ".rope.freq_base", c.rope_theta);
    out.set_f32(arch + ".attention.layer_norm_rms_epsilon", c.norm_eps);
    out.set_string("dqt.model", nlohmann::json(c).dump());
    out.set_string("dqt.method", nlohmann::json(model.method).dump());
    out.set_string("dqt.source_method", source.method.label());
    if (!options.data_dir.empty()) out.set_string("dqt.data_dir", options.data_dir);
    write_tokenizer(out, tokenizer);
    write_special_tokens(out, options.special, c.vocab_size);

    auto add = [&](GgufTensor tensor) {
        summary.tensor_types.push_back(tensor.type);
        out.add_tensor(std::move(tensor));
    };
    std::vector<float> code_scales;
    std::map<GgmlType, size_t> block_linear_weights;  // by the type they are stored as
    for (const ParamTensor& t : model.layout.tensors) {
        const std::string name = t.name + ".weight";
        const bool permute = rope_permuted(arch, t.name);
        code_scales.push_back(t.stores_codes() ? model.scale(t) : 0.0f);
        if (t.stores_codes() && t.role == TensorRole::block_linear) {
            std::vector<int8_t> codes(t.count());
            t.traits().read_integers(model.stored(t), t, t.traits().weight_scale(model.stored(t), t), 0, t.count(), codes.data());
            codes = rows_in_file_order(codes, t.rows, t.cols, c.head_dim(), permute);
            GgufTensor tensor =
                code_tensor(name, t, codes, t.traits().ternary_integers, options, summary.ternary_fallbacks);
            block_linear_weights[tensor.type] += t.count();
            add(std::move(tensor));
            // gamma: W = q / s = q * (1 / s), multiplied in after the matmul.
            add(float_tensor(t.name + ".scale", {1}, {1.0f / model.scale(t)}, GgufFloatFormat::f32));
            continue;
        }
        std::vector<float> values(t.count());
        model.read_dense(t, values.data());
        values = rows_in_file_order(values, t.rows, t.cols, c.head_dim(), permute);
        // Norm gains stay F32 (llama.cpp multiplies them in F32); so does a dequantized table.
        const GgufFloatFormat format = t.is_matrix() && !t.stores_codes() ? options.floats : GgufFloatFormat::f32;
        GgufTensor tensor = float_tensor(name, gguf_shape(t), values, format);
        if (t.role == TensorRole::block_linear) block_linear_weights[tensor.type] += t.count();
        add(std::move(tensor));
    }
    out.set_u32("general.file_type", llama_ftype_of(dominant_type(block_linear_weights)));
    out.set_f32s("dqt.code_scales", code_scales);
    out.write(path);
    return summary;
}

namespace {

// A file dqt wrote, tensor by tensor: its codes and scales (dqt.code_scales) or its values,
// back in dqt's row order.
class DqtGgufSource : public GgufSource {
public:
    DqtGgufSource(GgufReader reader, const ModelConfig& c, const MethodConfig& method)
        : GgufSource(std::move(reader), c, method), arch_(reader_.string("general.architecture")) {
        const GgufValue* scales = reader_.find("dqt.code_scales");
        require(scales != nullptr && scales->type == GgufValueType::array && scales->value.size() == layout_.tensors.size(),
                "GGUF file " + reader_.path() + ": dqt.code_scales is missing or does not match the model");
        for (const auto& scale : scales->value) code_scales_.push_back(scale.get<float>());
    }

    void read_values(const ParamTensor& t, float* out) const override {
        const std::vector<float> values = rows_in_model_order(decode_floats(reader_, info(t), t.count()), t.rows,
                                                              t.cols, config_.head_dim(), permuted(t));
        std::memcpy(out, values.data(), values.size() * sizeof(float));
    }

    IntegerScales read_integers(const ParamTensor& t, int8_t* q) const override {
        const float code_scale = code_scales_[static_cast<size_t>(t.tensor_id)];
        std::vector<int8_t> codes;
        if (t.role == TensorRole::block_linear) {
            codes = decode_codes(reader_, info(t), t.rows, t.cols);
        } else {
            // A dequantized table: its codes are round(value * scale), exactly.
            const std::vector<float> values = decode_floats(reader_, info(t), t.count());
            codes.resize(values.size());
            for (size_t i = 0; i < values.size(); ++i) codes[i] = static_cast<int8_t>(std::nearbyint(values[i] * code_scale));
        }
        if (permuted(t)) codes = rows_in_model_order(codes, t.rows, t.cols, config_.head_dim(), true);
        const CodeGrid grid = method_.grid;
        bool outside = false;  // an OR over the codes, which vectorises (a minmax_element does not)
        for (const int8_t code : codes) outside |= code < grid.qn() || code > grid.qp();
        require(!outside, "GGUF file " + reader_.path() + ": tensor " + t.name + ".weight holds a code outside the " +
                              grid.label() + "-bit grid");
        std::memcpy(q, codes.data(), codes.size());
        return integer_scales(t);
    }

private:
    bool permuted(const ParamTensor& t) const override { return rope_permuted(arch_, t.name); }
    IntegerScales integer_scales(const ParamTensor& t) const override {
        const float code_scale = code_scales_[static_cast<size_t>(t.tensor_id)];
        return {1.0f / code_scale, code_scale};
    }
    float ternary_block_scale(const ParamTensor&) const override { return 1.0f; }  // dqt writes d = 1

    std::string arch_;
    std::vector<float> code_scales_;
};

OpenedGguf open_dqt_gguf(GgufReader reader) {
    const std::string path = reader.path();
    require(reader.find("dqt.method") != nullptr, "GGUF file " + path + " has dqt.model without dqt.method");
    ModelConfig c;
    MethodConfig method;
    try {
        c = nlohmann::json::parse(reader.string("dqt.model")).get<ModelConfig>();
        method = nlohmann::json::parse(reader.string("dqt.method")).get<MethodConfig>();
    } catch (const nlohmann::json::exception& e) {
        throw Error("GGUF file " + path + ": dqt.model or dqt.method is malformed (" + quote_untrusted(e.what(), 120) + ")");
    }
    OpenedGguf opened;
    // No dataset unless the export named one: `dqt eval` then asks for --data.
    opened.data_dir = reader.find("dqt.data_dir") ? reader.string("dqt.data_dir") : "";
    c.validate();
    method.validate();
    require(static_cast<size_t>(c.n_layers) <= reader.tensors().size(),
            "GGUF file " + path + ": dqt.model describes " + std::to_string(c.n_layers) + " layers, but the file holds " +
                std::to_string(reader.tensors().size()) + " tensors");

    const GgufValue* blob = reader.find("dqt.tokenizer.data");
    require(blob != nullptr && blob->type == GgufValueType::array, "GGUF file " + path + " lacks dqt.tokenizer.data");
    std::string bytes;
    for (const auto& byte : blob->value) bytes.push_back(static_cast<char>(byte.get<uint8_t>()));
    opened.tokenizer = load_tokenizer(reader.string("dqt.tokenizer.kind"), bytes);
    require(opened.tokenizer->vocab_size() == c.vocab_size,
            "GGUF file " + path + ": the tokenizer's vocabulary does not match the model's");
    if (reader.find("dqt.special_tokens")) {
        try {
            opened.special = nlohmann::json::parse(reader.string("dqt.special_tokens")).get<SpecialTokens>();
        } catch (const nlohmann::json::exception& e) {
            throw Error("GGUF file " + path + ": dqt.special_tokens is malformed (" + quote_untrusted(e.what(), 120) + ")");
        }
        opened.special.check(c.vocab_size, "GGUF file " + path);
    }
    opened.tensors = std::make_unique<DqtGgufSource>(std::move(reader), c, method);
    return opened;
}

}  // namespace

OpenedGguf open_gguf(const std::string& path) {
    GgufReader reader(path);
    if (reader.find("dqt.model") == nullptr) return open_llamacpp_gguf(std::move(reader));
    return open_dqt_gguf(std::move(reader));
}

ImportedGguf import_gguf(const std::string& path) {
    OpenedGguf opened = open_gguf(path);
    return {read_parameters(*opened.tensors), std::move(opened.tokenizer), opened.data_dir, std::move(opened.special)};
}

}  // namespace dqt
