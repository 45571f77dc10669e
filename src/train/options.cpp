#include "train/options.h"

#include <cmath>
#include <utility>

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace dqt {

TrainDevice parse_train_device(const std::string& name) {
    if (name == "cpu") return TrainDevice::cpu;
    if (name == "cuda") return TrainDevice::cuda;
    throw Error("unknown device " + quote_untrusted(name, 20) + ": use cpu or cuda");
}

const char* train_device_name(TrainDevice device) { return device == TrainDevice::cuda ? "cuda" : "cpu"; }

void TrainOptions::validate() const {
    model.validate();
    method.validate();
    require(steps > 0, "--steps must be positive, got " + std::to_string(steps));
    require(batch > 0, "--batch must be positive, got " + std::to_string(batch));
    require(grad_accum > 0, "--grad-accum must be positive, got " + std::to_string(grad_accum));
    // Multiplied in double so that the check itself cannot wrap (2e9 x 2e9 x 32 did, to a negative
    // count that passed the later "more tokens than the training split" check).
    const double step_tokens = static_cast<double>(batch) * grad_accum * model.seq_len;
    require(step_tokens <= static_cast<double>(int64_t{1} << 40),
            "--batch x --grad-accum x seq_len = " + format_number(step_tokens) +
                " tokens per step is out of range (at most 2^40)");
    require(std::isfinite(lr) && lr > 0, "--lr must be a positive finite number, got " + format_number(lr));
    require(min_lr_ratio >= 0 && min_lr_ratio <= 1, "--min-lr-ratio must be in [0, 1]");
    require(warmup_steps >= 0, "--warmup must not be negative");
    require(adam.beta1 >= 0 && adam.beta1 < 1, "--beta1 must be in [0, 1)");
    require(adam.beta2 >= 0 && adam.beta2 < 1, "--beta2 must be in [0, 1)");
    require(std::isfinite(adam.eps) && adam.eps > 0, "--adam-eps must be a positive finite number");
    require(std::isfinite(adam.weight_decay) && adam.weight_decay >= 0,
            "--weight-decay must be a finite number >= 0");
    require(std::isfinite(grad_clip) && grad_clip >= 0,
            "--grad-clip must be a finite number >= 0 (0 disables clipping)");
    require(device == TrainDevice::cpu || !fused_update,
            "--device cuda runs unfused updates (the GPU's fused update is not built yet): drop --fused-update");
    require(device == TrainDevice::cuda || !recompute,
            "--recompute saves GPU memory (--device cuda); the CPU step keeps every activation: drop --recompute");
    require(!fused_update || grad_accum == 1,
            "--fused-update needs --grad-accum 1: accumulating micro-batches needs the whole-model gradient buffer "
            "that fused updates do without");
    require(!model.tie_embeddings || method.quantize_head == method.quantize_embedding,
            method.kind == Method::dqt
                ? "the head is tied to the embedding (the default): pass both --quantize-embedding and --quantize-head, "
                  "or neither, or --untie-embeddings"
                : "the head is tied to the embedding (the default), which bitnet keeps in fp32: add --untie-embeddings "
                  "to quantize a head of its own");
    for (const auto& [flag, bits] : {std::pair{"--compress-gradients", compression.gradient_bits},
                                     std::pair{"--compress-weights", compression.weight_bits}}) {
        require(bits == 0 || bits == 8 || bits == 4,
                std::string(flag) + " takes 8 or 4 bits per value, got " + std::to_string(bits));
    }
    require(!fused_update || !compression.any(),
            "--compress-gradients and --compress-weights act on data-parallel transfers, and --fused-update runs "
            "on one rank: drop one of them");
    require(eval_every >= 0, "--eval-every must not be negative");
    require(eval_tokens > 0, "--eval-tokens must be positive");
    require(log_every > 0, "--log-every must be positive");
    require(checkpoint_every >= 0, "--checkpoint-every must not be negative");
}

void to_json(nlohmann::json& j, const TrainOptions& o) {
    j = nlohmann::json{{"data_dir", o.data_dir},
                       {"out_dir", o.out_dir},
                       {"model", o.model},
                       {"method", o.method},
                       {"optim_state", state_dtype_bits(o.optim_state)},
                       {"steps", o.steps},
                       {"batch", o.batch},
                       {"grad_accum", o.grad_accum},
                       {"lr", o.lr},
                       {"min_lr_ratio", o.min_lr_ratio},
                       {"warmup_steps", o.warmup_steps},
                       {"beta1", o.adam.beta1},
                       {"beta2", o.adam.beta2},
                       {"adam_eps", o.adam.eps},
                       {"weight_decay", o.adam.weight_decay},
                       {"grad_clip", o.grad_clip},
                       {"fused_update", o.fused_update},
                       {"device", train_device_name(o.device)},
                       {"recompute", o.recompute},
                       {"compress_gradients_bits", o.compression.gradient_bits},
                       {"compress_weights_bits", o.compression.weight_bits},
                       {"eval_every", o.eval_every},
                       {"eval_tokens", o.eval_tokens},
                       {"log_every", o.log_every},
                       {"checkpoint_every", o.checkpoint_every},
                       {"seed", o.seed},
                       {"init_from", o.init_from},
                       {"special_tokens", o.special_tokens}};
}

void from_json(const nlohmann::json& j, TrainOptions& o) {
    try {
        o.data_dir = j.at("data_dir").get<std::string>();
        o.out_dir = j.at("out_dir").get<std::string>();
        o.model = j.at("model").get<ModelConfig>();
        o.method = j.at("method").get<MethodConfig>();
        o.optim_state = parse_state_dtype(j.at("optim_state").get<std::string>());
        o.steps = j.at("steps").get<int>();
        o.batch = j.at("batch").get<int>();
        o.grad_accum = j.at("grad_accum").get<int>();
        o.lr = j.at("lr").get<float>();
        o.min_lr_ratio = j.at("min_lr_ratio").get<float>();
        o.warmup_steps = j.at("warmup_steps").get<int>();
        o.adam.beta1 = j.at("beta1").get<float>();
        o.adam.beta2 = j.at("beta2").get<float>();
        o.adam.eps = j.at("adam_eps").get<float>();
        o.adam.weight_decay = j.at("weight_decay").get<float>();
        o.grad_clip = j.at("grad_clip").get<float>();
        // Absent from checkpoints written before the option existed: those trained unfused.
        o.fused_update = j.value("fused_update", false);
        o.device = parse_train_device(j.value("device", std::string("cpu")));  // absent: runs before the GPU path
        o.recompute = j.value("recompute", false);  // absent: runs before the option
        // Absent from checkpoints written before compressed transfers existed: fp32.
        o.compression.gradient_bits = j.value("compress_gradients_bits", 0);
        o.compression.weight_bits = j.value("compress_weights_bits", 0);
        o.eval_every = j.at("eval_every").get<int>();
        o.eval_tokens = j.at("eval_tokens").get<int64_t>();
        o.log_every = j.at("log_every").get<int>();
        o.checkpoint_every = j.at("checkpoint_every").get<int>();
        o.seed = j.at("seed").get<uint64_t>();
        // Absent from checkpoints written before --init-from existed: weights from the seed.
        o.init_from = j.value("init_from", std::string());
        // Absent from checkpoints written before special tokens were kept: none.
        if (j.contains("special_tokens")) o.special_tokens = j.at("special_tokens").get<SpecialTokens>();
    } catch (const nlohmann::json::exception& e) {
        throw Error("training options in checkpoint are incomplete or malformed (" + quote_untrusted(e.what(), 120) + ")");
    }
}

}  // namespace dqt
