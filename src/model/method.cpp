#include "model/method.h"

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace dqt {

void MethodConfig::validate() const {
    if (kind == Method::fp) {
        require(!quantize_embedding && !quantize_head,
                "--quantize-embedding and --quantize-head need --method bitnet or dqt (fp has nothing to quantize)");
    }
    if (kind == Method::bitnet) {
        require(!quantize_embedding,
                "--quantize-embedding needs --method dqt (BitNet keeps the embedding lookup in full precision)");
    }
    if (kind != Method::dqt) {
        require(rounding == Rounding::stochastic, "--rounding applies to --method dqt only");
        require(scale_rule == ScaleRule::reference, "--dqt-scale applies to --method dqt only");
    }
    require(residual_bits >= 0 && residual_bits <= 8, "--dqt-residual-bits must be 0 to 8, got " + std::to_string(residual_bits));
    require(residual_bits == 0 || kind == Method::dqt, "--dqt-residual-bits applies to --method dqt only");
    require(residual_overhang >= 0, "--dqt-overhang must be 0 or more, got " + std::to_string(residual_overhang));
    require(residual_overhang == 0 || residual_bits > 0, "--dqt-overhang needs --dqt-residual-bits (the fine position it extends)");
    // The residual is one int8: r ranges over [-H R, H R] at the outer codes, R = 2^residual_bits.
    require(residual_overhang == 0 || residual_overhang * (1 << residual_bits) <= 127,
            "--dqt-overhang " + std::to_string(residual_overhang) + " with --dqt-residual-bits " +
                std::to_string(residual_bits) + " does not fit the residual's byte: overhang x 2^bits must be at most 127");
}

std::string MethodConfig::label() const {
    switch (kind) {
        case Method::fp: return "fp";
        case Method::bitnet: return "bitnet";
        case Method::dqt:
            return "dqt-" + grid.label() + (rounding == Rounding::nearest ? "-nearest" : "") +
                   (scale_rule == ScaleRule::learned ? "-learned-scale" : "") +
                   (residual_bits > 0 ? "-residual" + std::to_string(residual_bits) : "") +
                   (residual_overhang > 0 ? "-overhang" + std::to_string(residual_overhang) : "");
    }
    return "?";
}

const char* method_name(Method method) {
    switch (method) {
        case Method::fp: return "fp";
        case Method::bitnet: return "bitnet";
        case Method::dqt: return "dqt";
    }
    return "?";
}

Method parse_method(const std::string& name) {
    if (name == "fp") return Method::fp;
    if (name == "bitnet") return Method::bitnet;
    if (name == "dqt") return Method::dqt;
    throw Error("unknown method '" + name + "': use fp, bitnet or dqt");
}

ComputeDtype parse_compute_dtype(const std::string& name) {
    if (name == "fp32") return ComputeDtype::fp32;
    if (name == "bf16") return ComputeDtype::bf16;
    throw Error("unknown compute dtype '" + name + "': use fp32 or bf16");
}

const char* compute_dtype_name(ComputeDtype dtype) { return dtype == ComputeDtype::bf16 ? "bf16" : "fp32"; }

Rounding parse_rounding(const std::string& name) {
    if (name == "stochastic") return Rounding::stochastic;
    if (name == "nearest") return Rounding::nearest;
    throw Error("unknown rounding '" + name + "': use stochastic or nearest");
}

const char* rounding_name(Rounding rounding) { return rounding == Rounding::nearest ? "nearest" : "stochastic"; }

ScaleRule parse_scale_rule(const std::string& name) {
    if (name == "reference") return ScaleRule::reference;
    if (name == "learned") return ScaleRule::learned;
    throw Error("unknown scale rule '" + name + "': use reference or learned");
}

const char* scale_rule_name(ScaleRule rule) { return rule == ScaleRule::learned ? "learned" : "reference"; }

void to_json(nlohmann::json& j, const MethodConfig& c) {
    j = nlohmann::json{{"method", method_name(c.kind)},
                       {"bits", c.grid.label()},
                       {"rounding", rounding_name(c.rounding)},
                       {"scale_rule", scale_rule_name(c.scale_rule)},
                       {"residual_bits", c.residual_bits},
                       {"quantize_embedding", c.quantize_embedding},
                       {"quantize_head", c.quantize_head},
                       {"compute_dtype", compute_dtype_name(c.compute)}};
    // Only where used, so that the files of runs without one (and their exports) keep their bytes.
    if (c.residual_overhang > 0) j["residual_overhang"] = c.residual_overhang;
}

void from_json(const nlohmann::json& j, MethodConfig& c) {
    try {
        c.kind = parse_method(j.at("method").get<std::string>());
        c.grid = parse_code_grid(j.at("bits").get<std::string>());
        c.rounding = parse_rounding(j.at("rounding").get<std::string>());
        // Absent in files written before the learned scale existed: those used the reference rule.
        c.scale_rule = parse_scale_rule(j.value("scale_rule", std::string("reference")));
        // Absent in files written before the residual existed: none.
        c.residual_bits = j.value("residual_bits", 0);
        c.residual_overhang = j.value("residual_overhang", 0);
        c.quantize_embedding = j.at("quantize_embedding").get<bool>();
        c.quantize_head = j.at("quantize_head").get<bool>();
        c.compute = parse_compute_dtype(j.at("compute_dtype").get<std::string>());
    } catch (const nlohmann::json::exception& e) {
        throw Error("method settings are incomplete or malformed (" + quote_untrusted(e.what(), 120) + ")");
    }
}

}  // namespace dqt
