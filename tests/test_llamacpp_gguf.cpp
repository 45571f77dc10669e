// GGUF files that llama.cpp's converter wrote (tests/golden/llamacpp_gguf/, made by
// scripts/llamacpp_gguf_fixtures.py) read into dqt: the values each type stores, ternary files
// read as codes, and what dqt cannot run refused in one line. That they run the same as in
// llama.cpp is test_llamacpp_interop.cpp's LlamaCppConvertedGgufsRunTheSameInDqt.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "data/byte_level_bpe.h"
#include "data/tokenizer.h"
#include "export/gguf_model.h"
#include "export/hf_import.h"
#include "export/ternary_blocks.h"
#include "infer/inference_model.h"
#include "io/gguf.h"
#include "model/initialization.h"
#include "quant/f16.h"
#include "test_helpers.h"
#include "train/model_checkpoint.h"

using namespace dqt;
using dqt::testing::TempDir;

namespace {

const std::string kConverted = std::string(DQT_SOURCE_DIR) + "/tests/golden/llamacpp_gguf/";

// Edits of a copy: metadata kept unless `keep_key` says no, values replaced by `edit_keys`,
// tensors kept unless `keep_tensor` says no, changed by `edit_tensor`, and `extra` added.
struct FileEdit {
    std::function<bool(const std::string&)> keep_key = [](const std::string&) { return true; };
    std::function<void(GgufWriter&)> edit_keys = [](GgufWriter&) {};
    std::function<bool(const std::string&)> keep_tensor = [](const std::string&) { return true; };
    std::function<void(GgufTensor&)> edit_tensor = [](GgufTensor&) {};
    std::vector<GgufTensor> extra;
};

void copy_value(GgufWriter& out, const std::string& key, const GgufValue& v) {
    switch (v.type) {
        case GgufValueType::uint32: return out.set_u32(key, v.value.get<uint32_t>());
        case GgufValueType::float32: return out.set_f32(key, v.value.get<float>());
        case GgufValueType::boolean: return out.set_bool(key, v.value.get<bool>());
        case GgufValueType::string: return out.set_string(key, v.value.get<std::string>());
        case GgufValueType::array:
            if (v.element_type == GgufValueType::string) return out.set_strings(key, v.value.get<std::vector<std::string>>());
            if (v.element_type == GgufValueType::float32) return out.set_f32s(key, v.value.get<std::vector<float>>());
            if (v.element_type == GgufValueType::int32) return out.set_i32s(key, v.value.get<std::vector<int32_t>>());
            break;
        default: break;
    }
    ADD_FAILURE() << "the fixture has a value type this copy does not know: " << key;
}

std::string edited_copy(const std::string& source, const std::string& path, const FileEdit& edit) {
    const GgufReader reader(source);
    GgufWriter out;
    for (const auto& [key, value] : reader.metadata())
        if (key != "general.alignment" && edit.keep_key(key)) copy_value(out, key, value);  // the writer sets it
    edit.edit_keys(out);
    for (const GgufReader::TensorInfo& info : reader.tensors()) {
        if (!edit.keep_tensor(info.name)) continue;
        GgufTensor tensor{info.name, info.ne, info.type, reader.read(info)};
        edit.edit_tensor(tensor);
        out.add_tensor(std::move(tensor));
    }
    for (const GgufTensor& tensor : edit.extra) out.add_tensor(tensor);
    out.write(path);
    return path;
}

// The message of the dqt::Error importing `path` throws ("" when it throws none).
std::string import_error(const std::string& path) {
    try {
        import_gguf(path);
    } catch (const Error& e) {
        return e.what();
    }
    return "";
}

std::vector<float> dense(const ModelParameters& model, const std::string& name) {
    const ParamTensor& t = model.layout.find(name);
    std::vector<float> values(t.count());
    model.read_dense(t, values.data());
    return values;
}

}  // namespace

// The same random model converted as F32, F16 and Q8_0: the F16 file holds the F32 values
// rounded to fp16, exactly, and the Q8_0 file each within what llama.cpp's quantizer leaves
// (codes rounded with d = the block's largest magnitude / 127, then d stored as fp16: half a
// step plus 127 times d's rounding), so each type's block scales are read and applied.
TEST(LlamaCppGguf, EachTypeHoldsTheConvertedValues) {
    const ImportedGguf f32 = import_gguf(kConverted + "gauss-f32.gguf");
    const ImportedGguf f16 = import_gguf(kConverted + "gauss-f16.gguf");
    const ImportedGguf q8 = import_gguf(kConverted + "gauss-q8_0.gguf");
    for (const ParamTensor& t : f32.model->layout.tensors) {
        SCOPED_TRACE(t.name);
        const std::vector<float> exact = dense(*f32.model, t.name), half = dense(*f16.model, t.name),
                                 eight = dense(*q8.model, t.name);
        if (!t.is_matrix()) {  // norms stay F32 in every file
            EXPECT_EQ(half, exact);
            EXPECT_EQ(eight, exact);
            continue;
        }
        int fp16_mismatches = 0, q8_outside = 0;
        for (size_t block = 0; block < exact.size() / 32; ++block) {
            float largest = 0.0f;
            for (size_t i = block * 32; i < block * 32 + 32; ++i) largest = std::max(largest, std::fabs(exact[i]));
            const double step = largest / 127.0, stored = f16_to_float(float_to_f16(static_cast<float>(step)));
            const double bound = 0.5 * step + 127.0 * std::fabs(stored - step);
            for (size_t i = block * 32; i < block * 32 + 32; ++i) {
                fp16_mismatches += half[i] != f16_to_float(float_to_f16(exact[i]));
                q8_outside += std::fabs(static_cast<double>(eight[i]) - exact[i]) > bound * (1.0 + 1e-6);
            }
        }
        EXPECT_EQ(fp16_mismatches, 0);
        EXPECT_EQ(q8_outside, 0);
    }
}

// A ternary model's TQ2_0 and TQ1_0 files (one fp16 d per matrix) are read as ternary dqt with
// the same codes and scale 1 / d; a file where one block's d differs is read as fp, each
// value code * d, that block's included.
TEST(LlamaCppGguf, TernaryFilesAreReadAsCodesUnlessTheirScalesDiffer) {
    const ImportedGguf tq2 = import_gguf(kConverted + "ternary-tq2_0.gguf");
    const ImportedGguf tq1 = import_gguf(kConverted + "ternary-tq1_0.gguf");
    ASSERT_EQ(tq2.model->method.kind, Method::dqt);
    ASSERT_TRUE(tq2.model->method.grid.ternary());
    const GgufReader file(kConverted + "ternary-tq2_0.gguf");
    for (const ParamTensor& t : tq2.model->layout.tensors) {
        SCOPED_TRACE(t.name);
        EXPECT_EQ(dense(*tq1.model, t.name), dense(*tq2.model, t.name));
        if (t.role != TensorRole::block_linear) continue;
        const BlockCodes blocks =
            decode_tq2_0_blocks(file.read(*file.find_tensor(t.name + ".weight")).data(), t.rows, t.cols, t.name);
        const std::vector<float> values = dense(*tq2.model, t.name);
        EXPECT_EQ(1.0f / tq2.model->scale(t), blocks.block_scales[0]);
        for (size_t i = 0; i < values.size(); ++i)
            ASSERT_FLOAT_EQ(values[i], blocks.codes[i] * blocks.block_scales[0]) << "element " << i;
    }

    TempDir dir("llamacpp-gguf-scales");
    FileEdit edit;
    edit.edit_tensor = [](GgufTensor& t) {
        if (t.name != "blk.0.attn_v.weight") return;
        const float d = f16_to_float(static_cast<uint16_t>(t.data[64 + 66] | t.data[65 + 66] << 8));
        const uint16_t doubled = float_to_f16(2.0f * d);  // the second block's scale
        t.data[64 + 66] = static_cast<uint8_t>(doubled & 0xff);
        t.data[65 + 66] = static_cast<uint8_t>(doubled >> 8);
    };
    const ImportedGguf mixed = import_gguf(edited_copy(kConverted + "ternary-tq2_0.gguf", dir / "mixed.gguf", edit));
    EXPECT_EQ(mixed.model->method.kind, Method::fp);
    for (const ParamTensor& t : mixed.model->layout.tensors) {
        const std::vector<float> ours = dense(*mixed.model, t.name), before = dense(*tq2.model, t.name);
        for (size_t i = 0; i < ours.size(); ++i) {
            const bool doubled = t.name == "blk.0.attn_v" && i >= 256 && i < 512;
            ASSERT_EQ(ours[i], doubled ? 2.0f * before[i] : before[i]) << t.name << " element " << i;
        }
    }
}

// `dqt generate`, `eval` and `serve` read these files tensor by tensor straight into the inference
// model (TQ2_0 codes copied as they are): the model the import builds, byte for byte. A block whose
// d is 0 holds zero codes whatever its bits say, on both paths.
TEST(LlamaCppGguf, TheInferenceLoadBuildsWhatTheImportBuilds) {
    TempDir dir("llamacpp-gguf-inference-load");
    FileEdit zero_block;
    zero_block.edit_tensor = [](GgufTensor& t) {
        if (t.name != "blk.0.attn_v.weight") return;
        t.data[64 + 66] = t.data[65 + 66] = 0;  // the second block's d, its codes left as they are
    };
    const std::string zeroed = edited_copy(kConverted + "ternary-tq2_0.gguf", dir / "zero-block.gguf", zero_block);
    for (const std::string& path :
         {kConverted + "gauss-f32.gguf", kConverted + "gauss-f16.gguf", kConverted + "gauss-q8_0.gguf",
          kConverted + "ternary-tq2_0.gguf", kConverted + "ternary-tq1_0.gguf", kConverted + "tiny-q8_0.gguf", zeroed}) {
        SCOPED_TRACE(path);
        const InferenceModel direct(*open_gguf(path).tensors);
        const InferenceModel through(*import_gguf(path).model);
        dqt::testing::expect_same_inference_model(direct, through);
    }
    const InferenceModel ternary(*open_gguf(zeroed).tensors);
    EXPECT_EQ(ternary.layers[0].wv.format, LinearFormat::ternary);
}

// What dqt's LLaMA cannot run, or cannot tokenize as llama.cpp would, is one line naming it.
TEST(LlamaCppGguf, WhatDqtCannotRunIsRefusedInOneLine) {
    TempDir dir("llamacpp-gguf-refuse");
    struct Case {
        std::string what;
        FileEdit edit;
        std::string message;
    };
    auto with_key = [](std::function<void(GgufWriter&)> set) {
        FileEdit edit;
        edit.edit_keys = std::move(set);
        return edit;
    };
    FileEdit missing, bias;
    missing.keep_tensor = [](const std::string& name) { return name != "blk.0.ffn_up.weight"; };
    bias.extra.push_back(GgufTensor{"blk.0.attn_q.bias", {256}, GgmlType::f32, std::vector<uint8_t>(1024, 0)});
    const std::vector<Case> cases = {
        {"another architecture", with_key([](GgufWriter& w) { w.set_string("general.architecture", "qwen2"); }),
         "architecture 'qwen2' is not read"},
        {"a missing tensor", missing, "lacks the tensor blk.0.ffn_up.weight"},
        {"a bias", bias, "holds the tensor 'blk.0.attn_q.bias', for which dqt's LLaMA model has no place"},
        {"partial rotary", with_key([](GgufWriter& w) { w.set_u32("llama.rope.dimension_count", 32); }),
         "partial rotary"},
        {"rope scaling", with_key([](GgufWriter& w) { w.set_string("llama.rope.scaling.type", "linear"); }),
         "rope scaling"},
        {"a WordPiece vocabulary", with_key([](GgufWriter& w) { w.set_string("tokenizer.ggml.model", "bert"); }),
         "tokenizer.ggml.model 'bert' is not read"},
        {"a byte-level pre-tokenizer without a regex here", with_key([](GgufWriter& w) {
             w.set_string("tokenizer.ggml.model", "gpt2");
             w.set_string("tokenizer.ggml.pre", "qwen2");
         }),
         "tokenizer.ggml.pre 'qwen2' is not read"},
        {"an unknown token type", with_key([](GgufWriter& w) {
             std::vector<int32_t> types(384, 1);
             types[5] = 9;
             w.set_i32s("tokenizer.ggml.token_type", types);
         }),
         "unknown type 9"},
        {"a vocabulary shorter than the table",
         with_key([](GgufWriter& w) { w.set_strings("tokenizer.ggml.tokens", {"<unk>", "a"}); }),
         "tokenizer.ggml.tokens has 2 entries where token_embd has 384 rows"},
    };
    for (const Case& c : cases) {
        SCOPED_TRACE(c.what);
        const std::string path = edited_copy(kConverted + "gauss-f16.gguf", dir / "edited.gguf", c.edit);
        const std::string message = import_error(path);
        EXPECT_NE(message.find(c.message), std::string::npos) << message;
        EXPECT_EQ(message.find('\n'), std::string::npos) << message;
    }
}

// A model with a byte-level BPE tokenizer (tests/golden/tokenizer_json: LLaMA 3's and GPT-2's
// pre-tokenizers) exports as llama.cpp's "gpt2" vocabulary, and that vocabulary alone (the file
// without dqt's keys, as another tool would leave it) reads back as a tokenizer giving
// tokenizers.js's ids; the byte vocabulary reads back as dqt's byte tokenizer.
TEST(LlamaCppGguf, ByteLevelVocabulariesReadBackWithoutDqtKeys) {
    TempDir dir("llamacpp-gguf-bpe");
    const std::string golden = std::string(DQT_SOURCE_DIR) + "/tests/golden/tokenizer_json/";
    const nlohmann::json expected = nlohmann::json::parse(dqt::testing::read_bytes(golden + "expected.json"));
    const auto texts = expected.at("texts").get<std::vector<std::string>>();
    FileEdit without_dqt_keys;
    without_dqt_keys.keep_key = [](const std::string& key) { return !key.starts_with("dqt."); };
    for (const std::string style : {"llama3", "gpt2", "byte"}) {
        SCOPED_TRACE(style);
        const std::unique_ptr<Tokenizer> tokenizer =
            style == "byte" ? make_byte_tokenizer()
                            : load_byte_level_bpe(dqt::testing::read_bytes(golden + style + "_style.json"), style);
        ModelParameters model(dqt::testing::small_llama_config(tokenizer->vocab_size()), MethodConfig{});
        initialize_parameters(model, 3);
        const std::string exported = dir / "model.gguf";
        export_gguf(model, *tokenizer, GgufExportOptions{}, exported);
        EXPECT_EQ(GgufReader(exported).string("tokenizer.ggml.model"), "gpt2");
        EXPECT_EQ(import_gguf(exported).tokenizer->serialize(), tokenizer->serialize());  // dqt's own keys
        const ImportedGguf foreign = import_gguf(edited_copy(exported, dir / "foreign.gguf", without_dqt_keys));
        EXPECT_EQ(foreign.tokenizer->kind(), tokenizer->kind());
        for (size_t i = 0; i < texts.size(); ++i) {
            const std::vector<int32_t> ids = foreign.tokenizer->encode(texts[i]);
            EXPECT_EQ(ids, tokenizer->encode(texts[i])) << texts[i];
            if (style != "byte") {
                EXPECT_EQ(ids, expected.at(style).at(i).get<std::vector<int32_t>>()) << texts[i];
            }
        }
        EXPECT_EQ(dense(*foreign.model, "token_embd"), dense(model, "token_embd"));
    }
}

// A sentencepiece vocabulary with LLaMA's dummy prefix (the fixture converted without
// add_space_prefix, which llama.cpp reads as true) encodes " " + text, and keeps the prefix
// through dqt's GGUF export (add_space_prefix true) and through the file without dqt's keys.
TEST(LlamaCppGguf, ALlamaVocabularyKeepsItsDummyPrefixThroughExport) {
    TempDir dir("llamacpp-gguf-prefix");
    const nlohmann::json expected = nlohmann::json::parse(dqt::testing::read_bytes(kConverted + "expected.json"));
    const auto texts = expected.at("texts").get<std::vector<std::string>>();
    const auto ids = expected.at("llama").get<std::vector<std::vector<int32_t>>>();
    const ImportedGguf imported = import_gguf(kConverted + "tiny-q8_0.gguf");
    EXPECT_EQ(GgufReader(kConverted + "tiny-q8_0.gguf").find("tokenizer.ggml.add_space_prefix"), nullptr);
    const std::string exported = dir / "exported.gguf";
    export_gguf(*imported.model, *imported.tokenizer, GgufExportOptions{}, exported);
    const GgufReader exported_file(exported);
    const GgufValue* prefix = exported_file.find("tokenizer.ggml.add_space_prefix");
    ASSERT_NE(prefix, nullptr);
    EXPECT_EQ(prefix->value, true);
    FileEdit without_dqt_keys;
    without_dqt_keys.keep_key = [](const std::string& key) { return !key.starts_with("dqt."); };
    const ImportedGguf again = import_gguf(exported);
    const ImportedGguf foreign = import_gguf(edited_copy(exported, dir / "foreign.gguf", without_dqt_keys));
    EXPECT_EQ(again.tokenizer->serialize(), imported.tokenizer->serialize());
    for (size_t t = 0; t < texts.size(); ++t) {
        EXPECT_EQ(imported.tokenizer->encode(texts[t]), ids[t]) << texts[t];
        EXPECT_EQ(foreign.tokenizer->encode(texts[t]), ids[t]) << texts[t];
        EXPECT_EQ(imported.tokenizer->decode(ids[t]), (texts[t].empty() ? "" : " ") + texts[t]);
    }
}

// The workflow of 30's issue on a llama.cpp file: its special tokens (BOS 1 added to prompts,
// EOS 2) survive `dqt data --tokenizer-from`, a fine-tuning run's checkpoint and both exports,
// where other engines read them (GGUF keys; config.json, generation_config.json and
// tokenizer_config.json) and dqt reads them back.
TEST(LlamaCppGguf, SpecialTokensSurviveFineTuningAndExport) {
    TempDir root("llamacpp-gguf-special");
    const std::string model = kConverted + "tiny-q8_0.gguf";
    const SpecialTokens original = import_gguf(model).special;
    ASSERT_EQ(original.bos, 1);
    ASSERT_TRUE(original.add_bos);
    ASSERT_EQ(original.end_of_generation, std::vector<int32_t>{2});
    dqt::testing::write_tiny_corpus(root / "corpus", 12);
    const std::string dqt = DQT_BINARY, data = root / "data", run = root / "run";
    for (const std::string& command :
         {dqt + " data --corpus " + root / "corpus" + " --tokenizer-from " + model + " --out " + data,
          dqt + " train --init-from " + model + " --data " + data + " --out " + run +
              " --method dqt --bits 1.58 --seq-len 32 --batch 2 --steps 2 --eval-tokens 256 --quiet --no-sample",
          dqt + " export " + run + "/checkpoint.dqt --out " + run + "/model.gguf",
          dqt + " export " + run + "/checkpoint.dqt --format safetensors --out " + run + "/hf",
          dqt + " generate " + run + "/model.gguf --prompt 'The weights' --tokens 4"}) {
        const dqt::testing::CommandResult result = dqt::testing::run_command(command);
        ASSERT_EQ(result.exit_code, 0) << command << "\n" << result.output;
    }
    auto same = [&](const SpecialTokens& s) {
        return s.bos == original.bos && s.add_bos == original.add_bos && s.end_of_generation == original.end_of_generation;
    };
    EXPECT_TRUE(same(load_model_checkpoint(run + "/checkpoint.dqt").options.special_tokens));
    EXPECT_TRUE(same(import_gguf(run + "/model.gguf").special));
    EXPECT_TRUE(same(import_hf_folder(run + "/hf").special));
    const GgufReader exported(run + "/model.gguf");
    EXPECT_EQ(exported.u32("tokenizer.ggml.bos_token_id"), 1u);
    EXPECT_EQ(exported.u32("tokenizer.ggml.eos_token_id"), 2u);
}
