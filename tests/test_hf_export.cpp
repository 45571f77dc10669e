// dqt models written as Hugging Face folders (export/hf_export.h) and read back
// (export/hf_import.h). scripts/hf_export_reference.py trained four tiny models with dqt,
// exported them into tests/golden/hf_export/ and ran them through its own PyTorch forward
// (rotate_half RoPE, the quantization the folder's config.json describes), writing its logits
// beside each. Here dqt imports each folder: its logits match the reference's, and exporting
// what it imported gives the committed files byte for byte.
//
// Tolerance: the fp model differs only by fp32 against float64 arithmetic: measured 2.9e-7 of
// the largest logit, bound 2e-5 (as tests/test_hf_import.cpp). The quantized ones also round
// each linear's input row to int8 from fp32 values that the two sides compute in different
// orders; a value within rounding error of a .5 boundary may round either way, moving that
// output by one activation step times a weight. Measured: at most 3.4e-7 of the largest logit
// (no such flip in these batches); bound 2e-4, which a 1% change of one tensor's weights
// exceeds (checked below).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "export/hf_export.h"
#include "export/hf_import.h"
#include "io/safetensors.h"
#include "model/initialization.h"
#include "model/llama.h"
#include "quant/codes.h"
#include "test_helpers.h"

using namespace dqt;
using dqt::testing::TempDir;

namespace {

const std::string kGolden = std::string(DQT_SOURCE_DIR) + "/tests/golden/hf_export/";
const std::vector<std::string> kModels = {"llama-fp", "bitnet-relu2", "dqt-ternary", "dqt-4-ends"};

double tolerance(const ModelParameters& model) { return model.method.kind == Method::fp ? 2e-5 : 2e-4; }


// A copy of a golden folder without the reference's logits (not part of the HF layout).
std::string model_copy(const TempDir& root, const std::string& name, const std::string& as) {
    const std::string folder = root / as;
    std::filesystem::copy(kGolden + name, folder);
    std::filesystem::remove(folder + "/expected.safetensors");
    return folder;
}

// Rewrites model.safetensors with one tensor's data changed by `edit` (F32 and I8 tensors).
void edit_tensor(const std::string& folder, const std::string& target,
                 const std::function<void(std::vector<float>&, std::vector<int8_t>&)>& edit) {
    const std::string path = folder + "/model.safetensors";
    std::vector<SafetensorsTensor> tensors;
    {
        const SafetensorsReader reader(path);
        for (const std::string& name : reader.names()) {
            std::vector<float> floats;
            std::vector<int8_t> codes;
            if (reader.dtype(name) == "F32") floats = reader.read_f32(name);
            if (reader.dtype(name) == "I8") codes = reader.read_i8(name);
            if (name == target) edit(floats, codes);
            std::string bytes = floats.empty() ? std::string(codes.begin(), codes.end())
                                               : std::string(reinterpret_cast<const char*>(floats.data()),
                                                             floats.size() * sizeof(float));
            tensors.push_back({name, reader.dtype(name), reader.shape(name), [bytes] { return bytes; }});
        }
    }
    write_safetensors(path, tensors, {});
}

void expect_error(const std::function<void()>& action, const std::string& needle) {
    try {
        action();
        ADD_FAILURE() << "no error for " << needle;
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
        EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
    }
}

void expect_same_weights(const ModelParameters& a, const ModelParameters& b) {
    EXPECT_EQ(nlohmann::json(a.config), nlohmann::json(b.config));
    EXPECT_EQ(nlohmann::json(a.method), nlohmann::json(b.method));
    ASSERT_EQ(a.values.size(), b.values.size());
    ASSERT_EQ(a.codes.size(), b.codes.size());
    EXPECT_TRUE(std::equal(a.values.begin(), a.values.end(), b.values.begin(),
                           [](float x, float y) { return std::bit_cast<uint32_t>(x) == std::bit_cast<uint32_t>(y); }));
    EXPECT_TRUE(std::equal(a.codes.begin(), a.codes.end(), b.codes.begin()));
    EXPECT_TRUE(std::equal(a.scales.begin(), a.scales.end(), b.scales.begin()));
}

}  // namespace

TEST(HfExport, AnIndependentForwardGivesDqtsLogits) {
    const std::map<std::string, std::string> labels = {{"llama-fp", "fp"},
                                                       {"bitnet-relu2", "bitnet"},
                                                       {"dqt-ternary", "dqt-1.58-learned-scale"},
                                                       {"dqt-4-ends", "dqt-4-learned-scale"}};
    for (const std::string& name : kModels) {
        SCOPED_TRACE(name);
        const ImportedHf imported = import_hf_folder(kGolden + name);
        ModelParameters& model = *imported.model;
        EXPECT_EQ(model.method.label(), labels.at(name));
        const double error = dqt::testing::reference_logit_error(model, kGolden + name + "/expected.safetensors");
        std::printf("[ hf export ] %s: largest logit error %.2e of the largest logit\n", name.c_str(), error);
        EXPECT_LT(error, tolerance(model));
        // The bound sees a small error in the weights: layer 0's up projection 1% larger.
        const ParamTensor& up = *model.tensors.layers[0].w_up;
        if (up.stores_codes()) {
            model.scale(up) /= 1.01f;
        } else {
            for (size_t i = 0; i < up.count(); ++i) model.value(up)[i] *= 1.01f;
        }
        EXPECT_GT(dqt::testing::reference_logit_error(model, kGolden + name + "/expected.safetensors"), tolerance(model));
    }
}

TEST(HfExport, WhatItImportsExportsToTheSameBytes) {
    TempDir root("hf-export-bytes");
    for (const std::string& name : kModels) {
        SCOPED_TRACE(name);
        const ImportedHf imported = import_hf_folder(kGolden + name);
        const std::string out = root / name;
        const HfExportSummary summary = export_hf_folder(*imported.model, *imported.tokenizer, imported.special, out);
        EXPECT_EQ(summary.architecture, name == "llama-fp" ? "LlamaForCausalLM" : "BitNetForCausalLM");
        for (const auto& file : std::filesystem::directory_iterator(out)) {
            const std::string file_name = file.path().filename().string();
            EXPECT_EQ(dqt::testing::read_bytes(file.path().string()), dqt::testing::read_bytes(kGolden + name + "/" + file_name))
                << file_name;
        }
        const bool bpe = imported.tokenizer->kind() == "bpe";
        EXPECT_EQ(std::filesystem::exists(out + "/tokenizer.model"), bpe);
        EXPECT_EQ(std::filesystem::exists(out + "/tokenizer.json"), !bpe);
        EXPECT_TRUE(imported.tokenizer->encode("The union shall endure.") ==
                    import_hf_tokenizer(out)->encode("The union shall endure."));
    }
}

// Every method's weights as dqt holds them (fp32 values, bitnet latents, codes and scales,
// quantized embedding and head) come back bit for bit, fresh from initialization.
TEST(HfExport, EveryMethodComesBackBitForBit) {
    TempDir root("hf-export-methods");
    ModelConfig config;
    config.dim = 32;
    config.n_layers = 1;
    config.n_heads = 2;
    config.n_kv_heads = 1;
    config.ffn_dim = 48;
    config.seq_len = 16;
    config.rope_theta = 500000.0f;
    std::vector<MethodConfig> methods(5);
    methods[1].kind = Method::bitnet;
    methods[2].kind = Method::dqt;
    methods[3].kind = Method::dqt;
    methods[3].grid = CodeGrid{3};
    methods[3].quantize_embedding = methods[3].quantize_head = true;
    methods[3].scale_rule = ScaleRule::learned;
    methods[4].kind = Method::dqt;
    methods[4].grid = CodeGrid{8};
    methods[4].residual_bits = 4;
    const std::unique_ptr<Tokenizer> tokenizer = make_byte_tokenizer();
    for (size_t k = 0; k < methods.size(); ++k) {
        SCOPED_TRACE(methods[k].label());
        ModelParameters model(config, methods[k]);
        initialize_parameters(model, 100 + k);
        const std::string out = root / std::to_string(k);
        export_hf_folder(model, *tokenizer, SpecialTokens{}, out);
        expect_same_weights(model, *import_hf_folder(out).model);
    }
}

TEST(HfExport, RefusesDamageWithOneLineAndKeepsWhatExists) {
    TempDir root("hf-export-refuse");
    const ImportedHf ternary = import_hf_folder(kGolden + "dqt-ternary");
    const std::string taken = root / "taken";
    std::filesystem::create_directory(taken);
    std::ofstream(taken + "/notes.txt") << "mine";
    expect_error([&] { export_hf_folder(*ternary.model, *ternary.tokenizer, SpecialTokens{}, taken); }, "is not an empty folder");
    EXPECT_EQ(dqt::testing::read_bytes(taken + "/notes.txt"), "mine");
    EXPECT_EQ(std::distance(std::filesystem::directory_iterator(root.path), {}), 1);  // no temporary left

    const std::string codes = "model.layers.0.self_attn.q_proj.weight_codes";
    std::string f = model_copy(root, "dqt-ternary", "edited");
    edit_tensor(f, codes, [](std::vector<float>&, std::vector<int8_t>& q) { q[5] = static_cast<int8_t>(q[5] == 1 ? 0 : 1); });
    expect_error([&] { import_hf_folder(f); }, "q_proj.weight is not model.layers.0.self_attn.q_proj.weight_codes");
    f = model_copy(root, "dqt-ternary", "off-grid");
    edit_tensor(f, codes, [](std::vector<float>&, std::vector<int8_t>& q) { q[0] = 2; });
    expect_error([&] { import_hf_folder(f); }, "holds a code outside the 1.58-bit grid");
    f = model_copy(root, "dqt-ternary", "bad-scale");
    edit_tensor(f, "model.layers.1.mlp.up_proj.weight_code_scale", [](std::vector<float>& s, std::vector<int8_t>&) { s[0] = -1; });
    expect_error([&] { import_hf_folder(f); }, "weight_code_scale must be a positive number");

    auto edit_json = [](const std::string& path, const std::function<void(nlohmann::json&)>& edit) {
        nlohmann::json j = nlohmann::json::parse(std::ifstream(path));
        edit(j);
        std::ofstream(path) << j.dump();
    };
    f = model_copy(root, "dqt-ternary", "other-quantization");
    edit_json(f + "/config.json", [](nlohmann::json& j) { j["quantization_config"] = {{"quant_method", "bitnet"}}; });
    expect_error([&] { import_hf_folder(f); }, "quant_method '\"bitnet\"' is not read");
    f = model_copy(root, "dqt-ternary", "normalizer");
    edit_json(f + "/tokenizer.json", [](nlohmann::json& j) { j["normalizer"] = {{"type", "NFC"}}; });
    expect_error([&] { import_hf_folder(f); }, "a normalizer");
    expect_error([&] { import_hf_tokenizer(f); }, "a normalizer");
}

// From a run to a Hugging Face folder and back into the commands, as a user runs them.
TEST(HfExport, CommandsExportAndReadAFolder) {
    TempDir root("hf-export-cli");
    const std::string dqt = DQT_BINARY;
    const std::string run = root / "run";
    const auto ran = [](const std::string& command, int expected_exit = 0) {
        const dqt::testing::CommandResult result = dqt::testing::run_command(command);
        EXPECT_EQ(result.exit_code, expected_exit) << command << "\n" << result.output;
        return result.output;
    };
    const std::string data = dqt::testing::tiny_dataset_dir();
    ran(dqt + " train --data " + data + " --out " + run +
        " --method dqt --bits 1.58 --dim 32 --layers 1 --heads 2 --ffn 64 --seq-len 16 --batch 2 --steps 3 "
        "--eval-tokens 256 --quiet --no-sample");
    EXPECT_NE(ran(dqt + " export " + run + "/checkpoint.dqt --format safetensors").find("wrote " + run + "/hf"),
              std::string::npos);
    const auto val_loss = [](const std::string& output) { return output.substr(output.find("val loss")); };
    EXPECT_EQ(val_loss(ran(dqt + " eval " + run + "/hf --data " + data + " --eval-tokens 256")),
              val_loss(ran(dqt + " eval " + run + "/checkpoint.dqt --data " + data + " --eval-tokens 256")));
    const std::string again = ran(dqt + " export " + run + "/checkpoint.dqt --format safetensors", 1);
    EXPECT_NE(again.find("exists and is not an empty folder"), std::string::npos) << again;
    const std::string f16 = ran(dqt + " export " + run + "/checkpoint.dqt --format safetensors --float-type f16 --out " +
                                    root / "f16",
                                1);
    EXPECT_NE(f16.find("--float-type applies to --format gguf only"), std::string::npos) << f16;
    EXPECT_FALSE(std::filesystem::exists(root / "f16"));
}
